/** A run with limits as its step checks read it, under the run's row lock, and count its steps. */
import { SPEND_CAP_MICROS } from './counters/counters.js';
import type { Queryable } from './db.js';

/** What a step check of a run with limits reads, under the run's row lock. */
export interface RunUsage {
  status: string;
  allowedSteps: number;
  lastCallHash: string | null;
  identicalCalls: number;
  /** The run's recorded cost (its finished steps'), rounded half-up to microdollars. */
  costMicros: number;
  /** Reserve mode: the estimates of its steps still in flight (ALLOWED); 0 when not read. */
  reservedMicros: number;
}

/**
 * Locks a run's row until the transaction ends and reads its usage: every step check of the run,
 * in any daemon, waits for the one before to commit, so each counts the steps allowed before it.
 * (The lock is the one insertSteps takes: a step written into the run waits as well.) Null when
 * the workspace has no such run. A row locked after a wait is read as that commit left it.
 */
export async function lockRunUsage(
  tx: Queryable,
  workspaceId: string,
  runId: string,
  options: { reservations: boolean } = { reservations: false },
): Promise<RunUsage | null> {
  // The cost is read in the same statement, from its snapshot: a result committed while the lock
  // was awaited is not in it (results do not take the run's lock: their totals are a row apart).
  const { rows } = await tx.query<{
    status: string;
    allowed_steps: number | null;
    last_call_hash: string | null;
    identical_calls: number | null;
    cost_micros: string | number | null;
    reserved_micros: string | number | null;
  }>(
    // The run's steps in flight are read through steps_outstanding_estimates (a late index). Every
    // step of a run with limits is written under this lock, so none is missed; a result finishing
    // one meanwhile may move its cost from one sum to the other, or not yet.
    `SELECT r.status, r.allowed_steps, r.last_call_hash, r.identical_calls,
       (SELECT round(t.total_cost_usd * 1000000) FROM run_totals t WHERE t.run_id = r.id) AS cost_micros,
       CASE WHEN $3 THEN (SELECT sum(s.estimate_micros) FROM steps s
         WHERE s.workspace_id = r.workspace_id AND s.run_id = r.id AND s.status = 'ALLOWED'
           AND s.estimate_micros IS NOT NULL) END AS reserved_micros
     FROM runs r WHERE r.id = $1 AND r.workspace_id = $2 FOR NO KEY UPDATE OF r`,
    [runId, workspaceId, options.reservations],
  );
  const run = rows[0];
  if (!run) return null;
  return {
    status: run.status,
    allowedSteps: Number(run.allowed_steps ?? 0),
    lastCallHash: run.last_call_hash,
    identicalCalls: Number(run.identical_calls ?? 0),
    costMicros: Math.min(Number(run.cost_micros ?? 0), SPEND_CAP_MICROS),
    reservedMicros: Math.min(Number(run.reserved_micros ?? 0), SPEND_CAP_MICROS),
  };
}

/** A step of a run with limits was allowed and written: its usage counts it (under the row lock). */
export async function countAllowedStep(
  tx: Queryable,
  runId: string,
  call: { hash: string | null; identicalCalls: number },
): Promise<void> {
  await tx.query(
    `UPDATE runs SET allowed_steps = coalesce(allowed_steps, 0) + 1, last_call_hash = $2, identical_calls = $3
     WHERE id = $1`,
    [runId, call.hash, call.identicalCalls],
  );
}
