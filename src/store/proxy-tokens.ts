/**
 * Run-scoped proxy tokens as stored: only their SHA-256, with the run and workspace they were
 * minted for (the tokens themselves are `proxy/proxy-tokens.ts`).
 */
import type { Queryable } from './db.js';

export interface ProxyTokenRow {
  run_id: string;
  workspace_id: string;
}

export async function insertProxyToken(
  db: Queryable,
  digest: Buffer,
  target: { runId: string; workspaceId: string },
  now: Date,
): Promise<void> {
  await db.query('INSERT INTO proxy_tokens (token_sha256, run_id, workspace_id, created_at) VALUES ($1, $2, $3, $4)', [
    digest,
    target.runId,
    target.workspaceId,
    now,
  ]);
}

/** The run and workspace a token's digest was minted for; null when unknown. */
export async function findProxyToken(db: Queryable, digest: Buffer): Promise<ProxyTokenRow | null> {
  const { rows } = await db.query<ProxyTokenRow>(
    'SELECT run_id, workspace_id FROM proxy_tokens WHERE token_sha256 = $1',
    [digest],
  );
  return rows[0] ?? null;
}
