/** API keys on the wire: what `/v1/api-keys` answers (never a secret or hash, but once at issue). */
import { Type, type Static } from './typebox.js';
import { Nullable, Timestamp, Uuid, UuidParam } from './common.js';

export const KeyRole = Type.Enum(['admin', 'agent']);

export const ApiKey = Type.Object({
  id: Uuid,
  prefix: Type.String(),
  name: Nullable(Type.String()),
  /** `agent`: runs, steps, proxy and MCP calls, reading the runs it started; `admin`: everything. */
  role: KeyRole,
  created_at: Timestamp,
  last_used_at: Nullable(Timestamp),
  revoked_at: Nullable(Timestamp),
});
export type ApiKey = Static<typeof ApiKey>;

/** A key just issued: the only answer that carries the secret. */
export const IssuedApiKey = Type.Object({ id: Uuid, prefix: Type.String(), api_key: Type.String() });
export type IssuedApiKey = Static<typeof IssuedApiKey>;

/** `POST /v1/api-keys`: a key beside the others (`role` defaults to admin). */
export const ApiKeyCreateBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200 }),
    role: Type.Optional(KeyRole),
  },
  { additionalProperties: false },
);
export type ApiKeyCreateBody = Static<typeof ApiKeyCreateBody>;

export const CreatedApiKey = Type.Object({
  id: Uuid,
  prefix: Type.String(),
  api_key: Type.String(),
  name: Type.String(),
  role: KeyRole,
});
export type CreatedApiKey = Static<typeof CreatedApiKey>;

export const ApiKeyParams = Type.Object({ id: UuidParam });
