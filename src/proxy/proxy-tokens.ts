/**
 * Run-scoped proxy tokens: what lets an unmodified SDK, which sends no guardrail header, proxy
 * into one run through its base URL alone (`/proxy/t/<token>/<provider>/...`). 256 random bits,
 * stored only as SHA-256; valid only while the run is RUNNING (the step insert checks that
 * atomically), and only for that run.
 */
import { hash, randomBytes } from 'node:crypto';
import type { Queryable } from '../store/db.js';
import { findProxyToken, insertProxyToken } from '../store/proxy-tokens.js';

/** `rgp_` and 43 base64url characters. */
export const PROXY_TOKEN_PATTERN = /^rgp_[A-Za-z0-9_-]{43}$/;

export interface TokenTarget {
  runId: string;
  workspaceId: string;
  /** The key that minted the token (or, minted otherwise, the run's): the calls made with it count against it. */
  apiKeyId: string | null;
}

const tokenDigest = (token: string): Buffer => hash('sha256', token, 'buffer');

export function newProxyToken(): string {
  return `rgp_${randomBytes(32).toString('base64url')}`;
}

export async function saveProxyToken(db: Queryable, token: string, target: TokenTarget, now: Date): Promise<void> {
  await insertProxyToken(db, tokenDigest(token), target, now);
}

export interface ProxyTokenStore {
  /** The run a token was minted for, whatever the run's status now; null when unknown. */
  resolve(token: string): Promise<TokenTarget | null>;
}

/**
 * Token to run is immutable once minted, so hits are kept in memory: a proxied call then costs no
 * round trip for it. Unknown tokens are not cached (a guesser gains nothing from a miss anyway).
 */
export function proxyTokenStore(db: Queryable, options: { cacheSize?: number } = {}): ProxyTokenStore {
  const max = options.cacheSize ?? 10_000;
  const cache = new Map<string, TokenTarget>();
  return {
    async resolve(token) {
      if (!PROXY_TOKEN_PATTERN.test(token)) return null;
      const digest = tokenDigest(token);
      const key = digest.toString('base64');
      const hit = cache.get(key);
      if (hit) return hit;
      const row = await findProxyToken(db, digest);
      if (!row) return null;
      const target = {
        runId: String(row.run_id),
        workspaceId: String(row.workspace_id),
        apiKeyId: row.api_key_id === null ? null : String(row.api_key_id),
      };
      if (cache.size >= max) cache.delete(cache.keys().next().value!);
      cache.set(key, target);
      return target;
    },
  };
}
