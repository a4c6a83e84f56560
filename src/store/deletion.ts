/**
 * Deleting what a workspace no longer wants: a pricing entry, an API key (revoked, never
 * removed), runs past their retention, a user's records. The daily usage counters (usage_daily,
 * user_usage_daily) are never touched: they are what the budgets and the monthly run limit read.
 * Runs are deleted only when ended and wholly before the counted windows (see
 * `countedWindowStart`), so a later `runguard reconcile`, which recounts the counters from the
 * records, finds nothing to lower in a window a guard reads. run_counts follows by its triggers.
 */
import { deleteKeyBudgets } from './budgets.js';
import type { Db, Queryable } from './db.js';

/** Runs deleted per transaction (their steps, totals and proxy tokens go with them). */
export const RUN_PURGE_BATCH = 1_000;

/**
 * The first instant a guard still counts at `now`: the earlier of yesterday's start (the daily
 * spend, which the periodic reconcile rechecks for today and yesterday) and this month's start
 * (the monthly run limit), all in UTC.
 */
export function countedWindowStart(now: Date): Date {
  const yesterday = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - 1);
  const month = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
  return new Date(Math.min(yesterday, month));
}

export async function deletePricing(db: Queryable, workspaceId: string, model: string): Promise<boolean> {
  const { rowCount } = await db.query('DELETE FROM model_pricing WHERE workspace_id = $1 AND model = $2', [
    workspaceId,
    model,
  ]);
  return rowCount > 0;
}

export type RevokeOutcome = 'revoked' | 'not_found' | 'already_revoked' | 'last_active_key';

/**
 * Revokes one key unless it is the workspace's last active one (a workspace left without a key
 * can only be reached by a dashboard login, if it has an account at all). The workspace's keys
 * are locked first, so two revocations at once cannot each leave the other's key as the last.
 */
export async function revokeApiKey(
  tx: Queryable,
  workspaceId: string,
  keyId: string,
  now: Date,
): Promise<RevokeOutcome> {
  const { rows } = await tx.query<{ id: string; revoked_at: Date | null }>(
    'SELECT id, revoked_at FROM api_keys WHERE workspace_id = $1 ORDER BY id FOR UPDATE',
    [workspaceId],
  );
  const key = rows.find((row) => row.id === keyId);
  if (!key) return 'not_found';
  if (key.revoked_at) return 'already_revoked';
  if (rows.filter((row) => !row.revoked_at).length <= 1) return 'last_active_key';
  await tx.query('UPDATE api_keys SET revoked_at = $2 WHERE id = $1', [keyId, now]);
  await deleteKeyBudgets(tx, workspaceId, [keyId]);
  return 'revoked';
}

/**
 * No step of the run finished at or after `$1`: a result may land after its run ended (a proxied
 * call's lingering result), and its cost counts on the day it lands. (Checked on the statement's
 * snapshot: a result committing while its batch is deleted is not seen. It would need a run ended
 * before the counted window, so 35 days at least under a retention, to land at that instant.)
 */
const NO_COUNTED_STEP = 'NOT EXISTS (SELECT 1 FROM steps s WHERE s.run_id = r.id AND s.finished_at >= $1)';

/** Which runs a purge may take: ended, started and ended before `$1`, no step finished since. */
const DELETABLE = `r.status <> 'RUNNING' AND r.ended_at IS NOT NULL AND r.ended_at < $1 AND r.started_at < $1 AND ${NO_COUNTED_STEP}`;

/** A batch of a user's deletable runs, locked; SKIP LOCKED, so purgers on several daemons share the work. */
const LOCK_USER_RUNS = `
SELECT r.id FROM runs r WHERE r.workspace_id = $2 AND r.user_id = $3 AND ${DELETABLE}
ORDER BY r.started_at LIMIT $4 FOR UPDATE SKIP LOCKED`;

/** A batch of runs past their workspace's retention (the earlier of it and `$1`). */
const LOCK_EXPIRED_RUNS = `
SELECT r.id FROM workspaces w JOIN runs r ON r.workspace_id = w.id
WHERE w.retention_days IS NOT NULL
  AND r.status <> 'RUNNING' AND r.ended_at IS NOT NULL
  AND r.ended_at < least($1::timestamptz, $2::timestamptz - make_interval(days => w.retention_days))
  AND r.started_at < least($1::timestamptz, $2::timestamptz - make_interval(days => w.retention_days))
  AND ${NO_COUNTED_STEP}
ORDER BY r.started_at LIMIT $3 FOR UPDATE OF r SKIP LOCKED`;

/** Deletes locked runs and what hangs on them, children first (foreign keys). */
async function deleteRuns(tx: Queryable, ids: string[]): Promise<void> {
  await tx.query('DELETE FROM steps WHERE run_id = ANY($1::uuid[])', [ids]);
  await tx.query('DELETE FROM proxy_tokens WHERE run_id = ANY($1::uuid[])', [ids]);
  await tx.query('DELETE FROM run_totals WHERE run_id = ANY($1::uuid[])', [ids]);
  await tx.query('DELETE FROM runs WHERE id = ANY($1::uuid[])', [ids]);
}

interface PurgeOptions {
  batchSize?: number;
  stop?: () => boolean;
}

async function purgeInBatches(
  db: Db,
  lock: (tx: Queryable, batchSize: number) => Promise<string[]>,
  options: PurgeOptions,
): Promise<number> {
  const batchSize = options.batchSize ?? RUN_PURGE_BATCH;
  let purged = 0;
  for (;;) {
    const count = await db.transaction(async (tx) => {
      const ids = await lock(tx, batchSize);
      if (ids.length > 0) await deleteRuns(tx, ids);
      return ids.length;
    });
    purged += count;
    if (count < batchSize || options.stop?.()) return purged;
  }
}

/** Deletes every run past its workspace's retention at `now`, a batch per transaction; resolves with how many. */
export function purgeExpiredRuns(db: Db, now: Date, options: PurgeOptions = {}): Promise<number> {
  const floor = countedWindowStart(now);
  return purgeInBatches(
    db,
    async (tx, batchSize) =>
      (await tx.query<{ id: string }>(LOCK_EXPIRED_RUNS, [floor, now, batchSize])).rows.map((run) => run.id),
    options,
  );
}

/** Deletes the user's ended runs outside the counted windows at `now`; resolves with how many. */
export function purgeUserRuns(
  db: Db,
  workspaceId: string,
  userId: string,
  now: Date,
  options: PurgeOptions = {},
): Promise<number> {
  const floor = countedWindowStart(now);
  return purgeInBatches(
    db,
    async (tx, batchSize) =>
      (await tx.query<{ id: string }>(LOCK_USER_RUNS, [floor, workspaceId, userId, batchSize])).rows.map(
        (run) => run.id,
      ),
    options,
  );
}

/** How many of the user's runs a deletion must leave: RUNNING, or touching a counted window. */
export async function countUserCountedRuns(
  db: Queryable,
  workspaceId: string,
  userId: string,
  now: Date,
): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM runs r WHERE r.workspace_id = $2 AND r.user_id = $3 AND NOT (${DELETABLE})`,
    [countedWindowStart(now), workspaceId, userId],
  );
  return Number(rows[0]!.n);
}

/**
 * Deletes the user's record (block, budget override, run count) and their daily usage rows
 * before the counted windows; those inside them stay, as the budgets read them. False when the
 * workspace has no such user and no runs of theirs were found.
 */
export async function deleteUserRecord(
  tx: Queryable,
  workspaceId: string,
  userId: string,
  now: Date,
): Promise<boolean> {
  const { rowCount } = await tx.query('DELETE FROM sdk_users WHERE workspace_id = $1 AND user_id = $2', [
    workspaceId,
    userId,
  ]);
  await tx.query('DELETE FROM user_usage_daily WHERE workspace_id = $1 AND user_id = $2 AND day < $3::date', [
    workspaceId,
    userId,
    countedWindowStart(now).toISOString().slice(0, 10),
  ]);
  return rowCount > 0;
}
