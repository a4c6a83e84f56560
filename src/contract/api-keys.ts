/** API keys on the wire: what `/v1/api-keys` answers (never a secret or hash, but once at issue). */
import { Type, type Static } from 'typebox';
import { Nullable, Timestamp, Uuid, UuidParam } from './common.js';

export const ApiKey = Type.Object({
  id: Uuid,
  prefix: Type.String(),
  name: Nullable(Type.String()),
  created_at: Timestamp,
  last_used_at: Nullable(Timestamp),
  revoked_at: Nullable(Timestamp),
});
export type ApiKey = Static<typeof ApiKey>;

/** A key just issued: the only answer that carries the secret. */
export const IssuedApiKey = Type.Object({ id: Uuid, prefix: Type.String(), api_key: Type.String() });
export type IssuedApiKey = Static<typeof IssuedApiKey>;

export const ApiKeyParams = Type.Object({ id: UuidParam });
