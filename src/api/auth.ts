/**
 * Resolves the caller's workspace from the Authorization header. Each route declares which
 * credential kinds it accepts (`config.auth`); the contract answers 401 for a missing, invalid
 * or wrong-kind credential.
 */
import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import type { Db } from '../store/db.js';
import { API_KEY_PATTERN, findApiKey, sha256, touchApiKey } from '../store/workspaces.js';
import type { Clock } from '../service/guard-service.js';

export type CredentialKind = 'key' | 'jwt';
/** `key`: API key only; `jwt`: dashboard token only; `any`: either; `none`: public. */
export type AuthPolicy = CredentialKind | 'any' | 'none';

export interface Principal {
  workspaceId: string;
  kind: CredentialKind;
  /** The API key's id, or the account's id for a JWT. */
  subjectId: string;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: AuthPolicy;
  }
  interface FastifyRequest {
    principal: Principal;
  }
}

/** Verifies a dashboard token; the accounts module provides it. */
export type JwtVerifier = (token: string) => Promise<Principal | null>;

/** `last_used_at` is bookkeeping: one write a minute per key is plenty. */
const TOUCH_INTERVAL_MS = 60_000;

export function bearerToken(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  if (!header) return null;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match ? match[1]! : null;
}

export async function verifyApiKey(db: Db, apiKey: string, now: Date): Promise<Principal | null> {
  const match = API_KEY_PATTERN.exec(apiKey);
  if (!match) return null;
  const row = await findApiKey(db, match[1]!);
  // Hash even when the prefix is unknown, so timing does not tell which prefixes exist.
  const presented = sha256(match[2]!);
  if (!row || row.revoked_at || !timingSafeEqual(presented, row.secret_sha256)) return null;
  if (!row.last_used_at || now.getTime() - row.last_used_at.getTime() > TOUCH_INTERVAL_MS) {
    await touchApiKey(db, row.id, now);
  }
  return { workspaceId: row.workspace_id, kind: 'key', subjectId: row.id };
}

export function registerAuth(app: FastifyInstance, deps: { db: Db; clock: Clock; verifyJwt?: JwtVerifier }) {
  app.decorateRequest('principal', null as unknown as Principal);
  app.addHook('onRequest', async (request) => {
    const policy = request.routeOptions.config.auth ?? 'none';
    if (policy === 'none') return;
    const token = bearerToken(request);
    if (!token) throw new ApiError('UNAUTHORIZED', 'Missing bearer credential.');
    const kind: CredentialKind = token.startsWith('lg_') ? 'key' : 'jwt';
    if (policy !== 'any' && policy !== kind) {
      throw new ApiError('UNAUTHORIZED', kind === 'key' ? 'This endpoint needs a dashboard token, not an API key.' : 'This endpoint needs an API key.');
    }
    const principal =
      kind === 'key' ? await verifyApiKey(deps.db, token, deps.clock.now()) : ((await deps.verifyJwt?.(token)) ?? null);
    if (!principal) throw new ApiError('UNAUTHORIZED', 'Invalid credential.');
    request.principal = principal;
  });
}
