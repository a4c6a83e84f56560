/**
 * Resolves the caller's workspace from the Authorization header. Each route declares which
 * credential kinds it accepts (`config.auth`); the contract answers 401 for a missing, invalid
 * or wrong-kind credential.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import type { CredentialKind, Principal } from '../admin/principal.js';
import type { ApiKeyVerifier } from '../admin/api-key-verifier.js';
import type { Clock } from '../clock.js';

export type { CredentialKind, Principal };
/** `key`: API key only; `jwt`: dashboard token only; `any`: either; `none`: public. */
export type AuthPolicy = CredentialKind | 'any' | 'none';

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: AuthPolicy;
    /**
     * An agent key may call this route (the run API: runs, steps, its own runs read). Every other
     * route answers an agent key 403 FORBIDDEN: settings, budgets, keys, users, pricing, webhooks.
     */
    agent?: boolean;
  }
  interface FastifyRequest {
    principal: Principal;
  }
}

/** Verifies a dashboard token; the accounts module provides it. */
export type JwtVerifier = (token: string) => Promise<Principal | null>;

export function bearerToken(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  if (!header) return null;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match ? match[1]! : null;
}

/** A JWT's three base64url parts. */
const JWT_SHAPE = /^[\w-]+\.[\w-]+\.[\w-]*$/;

export function registerAuth(
  app: FastifyInstance,
  deps: { keys: ApiKeyVerifier; clock: Clock; verifyJwt?: JwtVerifier },
) {
  app.decorateRequest('principal', null as unknown as Principal);
  // A route without a credential (the proxy, which checks its own) passes with no promise made.
  app.addHook('onRequest', (request, _reply, done) => {
    if ((request.routeOptions.config.auth ?? 'none') === 'none') done();
    else authenticate(request).then(() => done(), done);
  });

  async function authenticate(request: FastifyRequest): Promise<void> {
    const policy = request.routeOptions.config.auth ?? 'none';
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
    if (principal.role === 'agent' && request.routeOptions.config.agent !== true)
      throw new ApiError(
        'FORBIDDEN',
        'An agent key may only start runs, record steps and read the runs it started; use an admin key.',
      );
    request.principal = principal;
  }
}
