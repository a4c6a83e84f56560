/**
 * Outstanding reservations (`budget_mode: "reserve"`), as the records hold them: every unfinished
 * (ALLOWED) step with an estimate in a RUNNING run reserves its estimate until its result is
 * written, when its cost replaces it in the same statement (finishSteps), or its run ends. This is
 * the truth the budget checks of reserve mode read under a per-workspace lock, and the truth a
 * Redis copy would be rebuilt from.
 */
import { SPEND_COLUMNS, spendParams, toSpend, type CounterScope, type DailySpend } from './counters/counters.js';
import type { Queryable } from './db.js';

export interface Reserved {
  workspaceReservedMicros: number;
  userReservedMicros: number;
}

export const NO_RESERVATIONS: Reserved = { workspaceReservedMicros: 0, userReservedMicros: 0 };

/**
 * Serializes the reserving checks of one workspace until the transaction ends, in every daemon:
 * the next check counts this one's step (its reservation) once it commits. Taken after the
 * admission lock where both are (lockAdmissions), never before it.
 */
export async function lockReservations(tx: Queryable, workspaceId: string): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('reserve:' || $1, 0))`, [workspaceId]);
}

/** A workspace's outstanding reservations, and its user's (steps_outstanding_estimates). */
export async function outstandingReservations(db: Queryable, workspaceId: string, userId: string): Promise<Reserved> {
  const { rows } = await db.query<{ ws: string | number; usr: string | number }>(
    `SELECT coalesce(sum(s.estimate_micros), 0) AS ws,
       coalesce(sum(s.estimate_micros) FILTER (WHERE r.user_id = $2), 0) AS usr
     FROM steps s JOIN runs r ON r.id = s.run_id
     WHERE s.workspace_id = $1 AND s.status = 'ALLOWED' AND s.estimate_micros IS NOT NULL AND r.status = 'RUNNING'`,
    [workspaceId, userId],
  );
  return { workspaceReservedMicros: Number(rows[0]!.ws), userReservedMicros: Number(rows[0]!.usr) };
}

/**
 * Today's spend from the records (as `recordedSpend` reads it) and the outstanding reservations,
 * in one round trip: what a reserving check reads under its lock (a statement of its own, after
 * the lock's: its snapshot must see what the check before it committed).
 */
export async function spendAndReservations(db: Queryable, scope: CounterScope): Promise<DailySpend & Reserved> {
  const { rows } = await db.query<
    Parameters<typeof toSpend>[0] & Record<'ws_reserved' | 'usr_reserved', string | number>
  >(
    `SELECT ${SPEND_COLUMNS},
       coalesce(sum(s.estimate_micros), 0) AS ws_reserved,
       coalesce(sum(s.estimate_micros) FILTER (WHERE r.user_id = $3), 0) AS usr_reserved
     FROM steps s JOIN runs r ON r.id = s.run_id
     WHERE s.workspace_id = $1 AND s.status = 'ALLOWED' AND s.estimate_micros IS NOT NULL AND r.status = 'RUNNING'`,
    spendParams(scope),
  );
  const row = rows[0]!;
  return {
    ...toSpend(row),
    workspaceReservedMicros: Number(row.ws_reserved),
    userReservedMicros: Number(row.usr_reserved),
  };
}

/**
 * A run's outstanding reservations: its unfinished steps' estimates while it runs (0 once it
 * ended). What a run budget in reserve mode adds to the run's cost.
 */
export async function runReservedMicros(db: Queryable, workspaceId: string, runId: string): Promise<number> {
  const { rows } = await db.query<{ reserved: string | number }>(
    `SELECT coalesce(sum(s.estimate_micros), 0) AS reserved
     FROM steps s JOIN runs r ON r.id = s.run_id AND r.status = 'RUNNING'
     WHERE s.workspace_id = $1 AND s.run_id = $2 AND s.status = 'ALLOWED' AND s.estimate_micros IS NOT NULL`,
    [workspaceId, runId],
  );
  return Number(rows[0]!.reserved);
}
