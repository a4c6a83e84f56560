/**
 * Resolves the caller's workspace from the Authorization header. Each route declares which
 * credential kinds it accepts (`config.auth`); the contract answers 401 for a missing, invalid
 * or wrong-kind credential.
 */
import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import type { CredentialKind, Principal } from '../service/principal.js';
import type { Db } from '../store/db.js';
import { API_KEY_PATTERN, findApiKey, sha256, touchApiKey, type ApiKeyRow } from '../store/workspaces.js';
import type { Clock } from '../clock.js';

export type { CredentialKind, Principal };
/** `key`: API key only; `jwt`: dashboard token only; `any`: either; `none`: public. */
export type AuthPolicy = CredentialKind | 'any' | 'none';

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

/**
 * Verifies API keys. Key records are remembered for at most `cacheMs` (1 s by default): a key
 * revoked through another daemon stops working there within that second, and at once in the
 * daemon that revoked it (`forget`). The secret is checked on every call, in constant time.
 */
export class ApiKeyVerifier {
  private readonly cache = new Map<string, { row: ApiKeyRow | null; until: number }>();

  constructor(
    private readonly db: Db,
    private readonly cacheMs = 1_000,
  ) {}

  async verify(apiKey: string, now: Date): Promise<Principal | null> {
    const match = API_KEY_PATTERN.exec(apiKey);
    if (!match) return null;
    const prefix = match[1]!;
    let entry = this.cache.get(prefix);
    if (!entry || entry.until <= now.getTime()) {
      entry = { row: await findApiKey(this.db, prefix), until: now.getTime() + this.cacheMs };
      if (this.cacheMs > 0) this.remember(prefix, entry);
    }
    const row = entry.row;
    // Hash even when the prefix is unknown, so timing does not tell which prefixes exist.
    const presented = sha256(match[2]!);
    if (!row || row.revoked_at || !timingSafeEqual(presented, row.secret_sha256)) return null;
    if (!row.last_used_at || now.getTime() - row.last_used_at.getTime() > TOUCH_INTERVAL_MS) {
      row.last_used_at = now;
      await touchApiKey(this.db, row.id, now);
    }
    return { workspaceId: row.workspace_id, kind: 'key', subjectId: row.id };
  }

  /** Drops every remembered key (after this daemon revoked some). */
  forget(): void {
    this.cache.clear();
  }

  private remember(prefix: string, entry: { row: ApiKeyRow | null; until: number }) {
    // Bounded: unknown prefixes are remembered too, so a flood of made-up keys cannot grow it forever.
    if (this.cache.size >= 10_000) this.cache.clear();
    this.cache.set(prefix, entry);
  }
}

/** A JWT's three base64url parts. */
const JWT_SHAPE = /^[\w-]+\.[\w-]+\.[\w-]*$/;

export function registerAuth(
  app: FastifyInstance,
  deps: { keys: ApiKeyVerifier; clock: Clock; verifyJwt?: JwtVerifier },
) {
  app.decorateRequest('principal', null as unknown as Principal);
  app.addHook('onRequest', async (request) => {
    const policy = request.routeOptions.config.auth ?? 'none';
    if (policy === 'none') return;
    const token = bearerToken(request);
    if (!token) throw new ApiError('UNAUTHORIZED', 'Missing bearer credential.');
    const kind: CredentialKind | null = token.startsWith('lg_') ? 'key' : JWT_SHAPE.test(token) ? 'jwt' : null;
    // Neither kind: saying which kind the endpoint needs would read as "no credential was sent".
    if (!kind)
      throw new ApiError('UNAUTHORIZED', 'The credential is neither an API key (lg_...) nor a dashboard token.');
    if (policy !== 'any' && policy !== kind) {
      throw new ApiError(
        'UNAUTHORIZED',
        kind === 'key' ? 'This endpoint needs a dashboard token, not an API key.' : 'This endpoint needs an API key.',
      );
    }
    const principal =
      kind === 'key' ? await deps.keys.verify(token, deps.clock.now()) : ((await deps.verifyJwt?.(token)) ?? null);
    if (!principal) throw new ApiError('UNAUTHORIZED', 'Invalid credential.');
    request.principal = principal;
  });
}
