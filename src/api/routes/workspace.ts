/** Workspace configuration: the state the rules read. */
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { WorkspaceConfig } from '../../admin/workspace-config.js';
import { errorResponses, KillSwitch, KillSwitchBody, Workspace, WorkspaceUpdateBody } from '../schemas.js';
import { actorOf } from '../actor.js';

export const workspaceRoutes: FastifyPluginAsync<{ workspace: WorkspaceConfig }> = async (base, { workspace }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/workspace',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['workspace'],
        summary: 'Workspace configuration',
        response: { 200: Workspace, ...errorResponses(401) },
      },
    },
    async (request) => workspace.read(request.principal.workspaceId),
  );

  app.patch(
    '/v1/workspace',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['workspace'],
        summary: 'Change budgets (USD, null = unlimited) and limits (within the plan)',
        body: WorkspaceUpdateBody,
        response: { 200: Workspace, ...errorResponses(400, 401, 403, 422) },
      },
    },
    async (request) => workspace.update(actorOf(request.principal), request.principal.workspaceId, request.body),
  );

  app.post(
    '/v1/workspace/kill-switch',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['workspace'],
        summary: 'Turn the kill switch on or off (Scale plan or higher)',
        body: KillSwitchBody,
        response: { 200: KillSwitch, ...errorResponses(400, 401, 403, 422) },
      },
    },
    async (request) =>
      workspace.setKillSwitch(actorOf(request.principal), request.principal.workspaceId, request.body.active),
  );
};
