/** API keys: listed without secrets; regeneration revokes every earlier key at once. */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { ApiKeyVerifier } from '../auth.js';
import type { Clock } from '../../clock.js';
import type { Db } from '../../store/db.js';
import type { LocalKeyFile } from '../../local-key.js';
import { listApiKeys, regenerateApiKey } from '../../store/workspaces.js';
import { revokeKey } from '../../service/deletion.js';
import { ApiKey, ApiKeyParams, errorResponses, IssuedApiKey, NoBody, pathUuid } from '../schemas.js';

const iso = (d: Date | null) => (d ? new Date(d).toISOString() : null);

export const apiKeyRoutes: FastifyPluginAsync<{
  db: Db;
  clock: Clock;
  keys: ApiKeyVerifier;
  localKey?: LocalKeyFile;
}> = async (base, { db, clock, keys, localKey }) => {
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
    async (request) =>
      (await listApiKeys(db, request.principal.workspaceId)).map((k) => ({
        id: k.id,
        prefix: k.prefix,
        name: k.name,
        created_at: iso(k.created_at)!,
        last_used_at: iso(k.last_used_at),
        revoked_at: iso(k.revoked_at),
      })),
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
    async (request, reply) => {
      const key = await db.transaction((tx) => regenerateApiKey(tx, request.principal.workspaceId, clock.now()));
      keys.forget();
      // The keys are regenerated, and this answer is the only place the new one is shown: a key file
      // that cannot be written is logged, never a reason to lose it.
      await localKey?.regenerated(key.revokedPrefixes, key.apiKey).then(
        (saved) => saved && request.log.info({ file: localKey.path }, 'the local key file holds the regenerated key'),
        (error: unknown) =>
          request.log.error(
            { err: error, file: localKey.path },
            'the local key file could not take the regenerated key',
          ),
      );
      return reply.status(201).send({ id: key.id, prefix: key.prefix, api_key: key.apiKey });
    },
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
      await revokeKey(db, request.principal.workspaceId, pathUuid(request.params.id), clock.now());
      keys.forget(); // the verifier's cache must not go on accepting the revoked key
      return reply.status(204).send(null);
    },
  );
};
