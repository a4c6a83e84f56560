/**
 * A user's steps per minute (rule user_rate): a sliding window of the steps allowed in the last
 * minute, exact across daemons. Redis keeps it as a sorted set changed by one script; without
 * Redis, the database keeps it (`user_step_times`) under a per-user lock. A step takes a place
 * only when the window has room, in the same atomic step as the count.
 */
import type { CounterScope } from './counters.js';
import type { Queryable } from '../db.js';

export const STEP_RATE_WINDOW_MS = 60_000;

export interface StepSlotRequest {
  /** The workspace's `user_steps_per_minute`. */
  limit: number;
  /** The deciding daemon's clock: daemons' clocks must agree (NTP) for the window to be one. */
  nowMs: number;
  /** The step's id: its entry in the window. */
  stepId: string;
}

export interface StepSlot {
  /** The user's allowed steps in the window before this one. */
  stepsInWindow: number;
  /** Whether this step took a place (it had room: `stepsInWindow < limit`). */
  taken: boolean;
  /** When the oldest step in the window was allowed (ms since the epoch); null when none is. */
  oldestAtMs: number | null;
  /** Gives the place back (the step was not written). Idempotent. */
  release(): Promise<void>;
}

/**
 * The database's window, in the caller's transaction: its place is given back by the rollback.
 * Two statements: the lock, then (with a snapshot taken after it) prune, count and take.
 */
export async function takeSqlStepSlot(tx: Queryable, scope: CounterScope, request: StepSlotRequest): Promise<StepSlot> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('rate:' || $1 || '/' || $2, 0))`, [
    scope.workspaceId,
    scope.userId,
  ]);
  const { rows } = await tx.query<{ steps: string | number; oldest: Date | null }>(
    `WITH pruned AS (
       DELETE FROM user_step_times WHERE workspace_id = $1 AND user_id = $2 AND at <= $3
     ), window_now AS (
       SELECT count(*) AS steps, min(at) AS oldest FROM user_step_times
       WHERE workspace_id = $1 AND user_id = $2 AND at > $3
     ), taken AS (
       INSERT INTO user_step_times (workspace_id, user_id, at, step_id)
       SELECT $1, $2, $4, $5 FROM window_now WHERE steps < $6
     )
     SELECT steps, oldest FROM window_now`,
    [
      scope.workspaceId,
      scope.userId,
      new Date(request.nowMs - STEP_RATE_WINDOW_MS),
      new Date(request.nowMs),
      request.stepId,
      request.limit,
    ],
  );
  const steps = Number(rows[0]!.steps);
  const oldest = rows[0]!.oldest;
  return {
    stepsInWindow: steps,
    taken: steps < request.limit,
    oldestAtMs: oldest === null ? null : new Date(oldest).getTime(),
    release: async () => {},
  };
}
