/** Minting a run's proxy token: the base URLs `runguard exec` hands to an unmodified agent. */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ApiError } from '../../errors.js';
import type { Clock } from '../../clock.js';
import type { Db } from '../../store/db.js';
import { sdkBaseUrl, type ProviderRegistry } from '../../proxy/provider-registry.js';
import { newProxyToken, saveProxyToken } from '../../proxy/proxy-tokens.js';
import { NoBody, Nullable, UuidParam, errorResponses, pathUuid } from '../schemas.js';

export const proxyTokenRoutes: FastifyPluginAsync<{
  db: Db;
  clock: Clock;
  providers: ProviderRegistry;
  /** The daemon's address as agents reach it (configuration, or where it listens). */
  publicUrl: () => string;
}> = async (base, { db, clock, providers, publicUrl }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.post(
    '/v1/runs/:run_id/proxy-token',
    {
      config: { auth: 'key' },
      schema: {
        tags: ['proxy'],
        summary: 'Mint a token that proxies model calls into this run while it is RUNNING; answers the SDK base URLs',
        params: Type.Object({ run_id: UuidParam }),
        body: NoBody,
        response: {
          201: Type.Object({
            token: Type.String(),
            expires_at: Nullable(Type.String({ format: 'date-time' })),
            urls: Type.Record(Type.String(), Type.String()),
          }),
          ...errorResponses(401, 404, 409, 422),
        },
      },
    },
    async (request, reply) => {
      const { workspaceId } = request.principal;
      const runId = pathUuid(request.params.run_id);
      const { rows } = await db.query<{ status: string }>(
        'SELECT status FROM runs WHERE id = $1 AND workspace_id = $2',
        [runId, workspaceId],
      );
      if (!rows[0]) throw new ApiError('RUN_NOT_FOUND');
      if (rows[0].status !== 'RUNNING') throw new ApiError('RUN_NOT_RUNNING');
      const token = newProxyToken();
      await saveProxyToken(db, token, { runId, workspaceId }, clock.now());
      // From configuration, never from the Host header: a client may write any host there, and the
      // URL carries a credential to wherever it names.
      const proxyBase = `${publicUrl()}/proxy/t/${token}`;
      const urls: Record<string, string> = {};
      for (const name of providers.names()) urls[name] = sdkBaseUrl(providers.get(name)!, proxyBase);
      // Valid for as long as the run is RUNNING: no clock of its own.
      return reply.status(201).send({ token, expires_at: null, urls });
    },
  );
};
