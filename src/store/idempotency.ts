/**
 * Idempotency-Key records: the first answer to a POST, replayed for a retry of the same request
 * within the retention window, so a retried run start or step creation never counts twice.
 */
import { createHash } from 'node:crypto';
import type { Queryable } from './db.js';

export const IDEMPOTENCY_RETENTION_HOURS = 24;
/** How often a daemon purges the records past their retention (the stale-run sweeper's timer). */
export const IDEMPOTENCY_PURGE_INTERVAL_MS = 3_600_000;
/** Records deleted per purge statement: one statement never holds many row locks or runs long. */
export const IDEMPOTENCY_PURGE_BATCH = 5_000;

export interface IdempotencyClaim {
  workspaceId: string;
  key: string;
  /** Hash of the method, route and body: a reuse with another request is refused. */
  fingerprint: string;
  /** The status the route answers with, kept with the record (the service knows no HTTP). */
  answerStatus: number;
}

export interface StoredAnswer {
  fingerprint: string;
  statusCode: number;
  body: unknown;
}

export function fingerprint(method: string, route: string, body: unknown): string {
  return createHash('sha256')
    .update(`${method} ${route}\n${JSON.stringify(body ?? null)}`)
    .digest('hex');
}

export async function findAnswer(
  db: Queryable,
  workspaceId: string,
  key: string,
  now: Date,
): Promise<StoredAnswer | null> {
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
export async function saveAnswer(tx: Queryable, claim: IdempotencyClaim, body: unknown, now: Date): Promise<boolean> {
  const { rowCount } = await tx.query(
    `INSERT INTO idempotency_keys AS k (workspace_id, key, fingerprint, status_code, response, created_at)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (workspace_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
       status_code = EXCLUDED.status_code, response = EXCLUDED.response, created_at = EXCLUDED.created_at
     WHERE k.created_at <= $6::timestamptz - make_interval(hours => $7)`,
    [
      claim.workspaceId,
      claim.key,
      claim.fingerprint,
      claim.answerStatus,
      JSON.stringify(body),
      now,
      IDEMPOTENCY_RETENTION_HOURS,
    ],
  );
  return rowCount > 0;
}

/**
 * Deletes a batch of the oldest records past their retention at `now` (the bound `findAnswer`
 * and `saveAnswer` use: a record this deletes is one they already treat as absent). The batch is
 * locked `FOR UPDATE SKIP LOCKED`, so purgers on several daemons take different rows, and a
 * record a save is refreshing (locked) is left to it; then deleted by its row address (a TID
 * scan: no pass over the table), which the lock keeps from moving meanwhile. The outer
 * condition checks the age again, on the version locked.
 */
const PURGE_BATCH = `
DELETE FROM idempotency_keys
WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM idempotency_keys
    WHERE created_at <= $1::timestamptz - make_interval(hours => $2)
    ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED))
  AND created_at <= $1::timestamptz - make_interval(hours => $2)`;

/**
 * Purges the records past their retention at `now`, a batch per statement (each commits on its
 * own), until a batch comes back short (the rest is gone, or another purger holds it) or `stop`
 * says so. Resolves with how many this call deleted.
 */
export async function purgeExpiredAnswers(
  db: Queryable,
  now: Date,
  options: { batchSize?: number; stop?: () => boolean } = {},
): Promise<number> {
  const batchSize = options.batchSize ?? IDEMPOTENCY_PURGE_BATCH;
  let purged = 0;
  for (;;) {
    const { rowCount } = await db.query(PURGE_BATCH, [now, IDEMPOTENCY_RETENTION_HOURS, batchSize]);
    purged += rowCount;
    if (rowCount < batchSize || options.stop?.()) return purged;
  }
}
