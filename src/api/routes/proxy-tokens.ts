/** Minting a run's proxy token: the base URLs `runguard exec` hands to an unmodified agent. */
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { ProxyTokenIssuer } from '../../proxy/proxy-token-issuer.js';
import { NoBody, ProxyToken, RunParams, errorResponses, pathUuid } from '../schemas.js';

export const proxyTokenRoutes: FastifyPluginAsync<{ issuer: ProxyTokenIssuer }> = async (base, { issuer }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/v1/runs/:run_id/proxy-token',
    {
      config: { auth: 'key', agent: true },
      schema: {
        tags: ['proxy'],
        summary: 'Mint a token that proxies model calls into this run while it is RUNNING; answers the SDK base URLs',
        params: RunParams,
        body: NoBody,
        response: {
          201: ProxyToken,
          ...errorResponses(401, 404, 409, 422),
        },
      },
    },
    async (request, reply) => {
      const { principal } = request;
      const agentKeyId = principal.role === 'agent' ? principal.subjectId : null;
      const keyId = principal.kind === 'key' ? principal.subjectId : null;
      const runId = pathUuid(request.params.run_id);
      return reply.status(201).send(await issuer.issue(principal.workspaceId, runId, keyId, agentKeyId));
    },
  );
};
