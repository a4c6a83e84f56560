/** API keys: listed without secrets; regeneration revokes every earlier key at once. */
import { Type } from '../../contract/typebox.js';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { ApiKeys } from '../../admin/api-keys.js';
import {
  ApiKey,
  ApiKeyCreateBody,
  ApiKeyParams,
  CreatedApiKey,
  errorResponses,
  IssuedApiKey,
  NoBody,
  pathUuid,
} from '../schemas.js';

export const apiKeyRoutes: FastifyPluginAsync<{ apiKeys: ApiKeys }> = async (base, { apiKeys }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/api-keys',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['api-keys'],
        summary: "The workspace's API keys (never a secret or hash)",
        response: {
          200: Type.Array(ApiKey),
          ...errorResponses(401),
        },
      },
    },
    async (request) => apiKeys.list(request.principal.workspaceId),
  );

  app.post(
    '/v1/api-keys',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['api-keys'],
        summary: 'Issue one more key with a role (the secret is shown once); the others stay',
        body: ApiKeyCreateBody,
        response: { 201: CreatedApiKey, ...errorResponses(401, 403, 422) },
      },
    },
    async (request, reply) => reply.status(201).send(await apiKeys.create(request.principal.workspaceId, request.body)),
  );

  app.post(
    '/v1/api-keys/regenerate',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['api-keys'],
        summary: 'Issue a new key (shown once) and revoke every earlier key of the workspace',
        body: NoBody,
        response: {
          201: IssuedApiKey,
          ...errorResponses(401, 422),
        },
      },
    },
    async (request, reply) =>
      reply.status(201).send(await apiKeys.regenerate(request.principal.workspaceId, request.log)),
  );

  app.delete(
    '/v1/api-keys/:id',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['api-keys'],
        summary: "Revoke one key (never the workspace's last active one: 409 LAST_ACTIVE_KEY)",
        params: ApiKeyParams,
        response: { 204: Type.Null(), ...errorResponses(401, 404, 409) },
      },
    },
    async (request, reply) => {
      await apiKeys.revoke(request.principal.workspaceId, pathUuid(request.params.id));
      return reply.status(204).send(null);
    },
  );
};
