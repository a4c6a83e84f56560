/**
 * Idempotency-Key records: the first answer to a POST, replayed for a retry of the same request
 * within the retention window, so a retried run start or step creation never counts twice.
 */
import { createHash } from 'node:crypto';
import type { Queryable } from './db.js';

export const IDEMPOTENCY_RETENTION_HOURS = 24;

export interface IdempotencyClaim {
  workspaceId: string;
  key: string;
  /** Hash of the method, route and body: a reuse with another request is refused. */
  fingerprint: string;
}

export interface StoredAnswer {
  fingerprint: string;
  statusCode: number;
  body: unknown;
}

export function fingerprint(method: string, route: string, body: unknown): string {
  return createHash('sha256').update(`${method} ${route}\n${JSON.stringify(body ?? null)}`).digest('hex');
}

export async function findAnswer(db: Queryable, workspaceId: string, key: string, now: Date): Promise<StoredAnswer | null> {
  const { rows } = await db.query<{ fingerprint: string; status_code: number; response: unknown }>(
    `SELECT fingerprint, status_code, response FROM idempotency_keys
     WHERE workspace_id = $1 AND key = $2 AND created_at > $3::timestamptz - make_interval(hours => $4)`,
    [workspaceId, key, now, IDEMPOTENCY_RETENTION_HOURS],
  );
  const row = rows[0];
  return row ? { fingerprint: row.fingerprint, statusCode: Number(row.status_code), body: row.response } : null;
}

/**
 * Saves the answer in the transaction that made it; false when a live record of the key exists
 * (a concurrent twin of the request committed first: the caller rolls its own work back).
 */
export async function saveAnswer(
  tx: Queryable,
  claim: IdempotencyClaim,
  statusCode: number,
  body: unknown,
  now: Date,
): Promise<boolean> {
  const { rowCount } = await tx.query(
    `INSERT INTO idempotency_keys AS k (workspace_id, key, fingerprint, status_code, response, created_at)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (workspace_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
       status_code = EXCLUDED.status_code, response = EXCLUDED.response, created_at = EXCLUDED.created_at
     WHERE k.created_at <= $6::timestamptz - make_interval(hours => $7)`,
    [claim.workspaceId, claim.key, claim.fingerprint, statusCode, JSON.stringify(body), now, IDEMPOTENCY_RETENTION_HOURS],
  );
  return rowCount > 0;
}
