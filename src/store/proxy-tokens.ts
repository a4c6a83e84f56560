/**
 * Run-scoped proxy tokens as stored: only their SHA-256, with the run and workspace they were
 * minted for (the tokens themselves are `proxy/proxy-tokens.ts`).
 */
import type { Queryable } from './db.js';

export interface ProxyTokenRow {
  run_id: string;
  workspace_id: string;
  /** The key that minted it, or the run's key (a token minted before migration 26). */
  api_key_id: string | null;
}

export async function insertProxyToken(
  db: Queryable,
  digest: Buffer,
  target: { runId: string; workspaceId: string; apiKeyId: string | null },
  now: Date,
): Promise<void> {
  await db.query(
    'INSERT INTO proxy_tokens (token_sha256, run_id, workspace_id, created_at, api_key_id) VALUES ($1, $2, $3, $4, $5)',
    [digest, target.runId, target.workspaceId, now, target.apiKeyId],
  );
}

/** The run and workspace a token's digest was minted for; null when unknown. */
export async function findProxyToken(db: Queryable, digest: Buffer): Promise<ProxyTokenRow | null> {
  const { rows } = await db.query<ProxyTokenRow>(
    `SELECT t.run_id, t.workspace_id, coalesce(t.api_key_id, r.api_key_id) AS api_key_id
     FROM proxy_tokens t LEFT JOIN runs r ON r.id = t.run_id WHERE t.token_sha256 = $1`,
    [digest],
  );
  return rows[0] ?? null;
}
