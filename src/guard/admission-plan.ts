/**
 * How a run start or a step is admitted: the one choice of write path, made before anything is
 * read under a lock. Pure: the workspace's state, the run's limits, the estimate and whether the
 * request carries an idempotency key decide it (unit-tested without a database).
 */
import type { RunLimitValues } from '../store/workspaces.js';
import type { GuardState } from '../store/workspaces.js';
import { readsReservations, reservesAgainstBudget } from './guard-snapshot.js';

/** What is admitted: a run start (the API's), a run with its proxied call's first step, a step. */
export type AdmissionSubject = 'run' | 'run_with_step' | 'step';

export interface AdmissionRequest {
  subject: AdmissionSubject;
  state: GuardState;
  /** A step's run's limits (a run start's first step reads a fresh run's usage: no lock). */
  runLimits: RunLimitValues | null;
  estimateMicros: number | null;
  idempotent: boolean;
}

/** The locks a transaction takes, in this order everywhere: admission, run, reservation. */
export interface AdmissionLocks {
  /** Rules 5 and 6: the workspace's admission lock, then its run counts (exact until commit). */
  admission: boolean;
  /** Rules 8 to 10: the run's row, its usage read under it; with its reservations in reserve mode. */
  run: { withReservations: boolean } | null;
  /** Reserve mode, a step that reserves: the workspace's reservation lock, in its queue. */
  reservation: boolean;
}

/**
 * The write path.
 * - `batched`: decided on what was read unlocked, then written in a group commit with the other
 *   records of the moment; the decision is final before the record is durable.
 * - `own_transaction`: decided and written in a transaction of its own, so that a remembered
 *   answer, or a reservation under its lock, commits with the record.
 * - `guarded`: as `own_transaction`, decided on counts read under the locks the runaway and run
 *   limit rules need, and where a user rate applies, after taking a place in the user's window.
 */
export type AdmissionPlan =
  | { kind: 'batched'; readsReservations: boolean }
  | { kind: 'own_transaction'; readsReservations: boolean; locks: AdmissionLocks; remember: boolean }
  | {
      kind: 'guarded';
      readsReservations: boolean;
      locks: AdmissionLocks;
      /** Rule 11: the user's steps per minute; a place is taken once the other rules allow. */
      rateSlot: { limit: number } | null;
      remember: boolean;
    };

export function planAdmission(request: AdmissionRequest): AdmissionPlan {
  const { subject, state, runLimits, estimateMicros, idempotent } = request;
  const workspace = state.workspace;
  const reads = readsReservations(state);
  const countsRuns =
    subject !== 'step' && (workspace.monthly_run_limit !== null || workspace.max_concurrent_runs !== null);
  const runLock =
    subject === 'step' && runLimits !== null
      ? { withReservations: workspace.budget_mode === 'reserve' && runLimits.maxCostMicros !== null }
      : null;
  const rate = subject !== 'run' ? workspace.user_steps_per_minute : null;
  const locks: AdmissionLocks = {
    admission: countsRuns,
    run: runLock,
    reservation: subject !== 'run' && reservesAgainstBudget(state, estimateMicros),
  };
  if (countsRuns || runLock !== null || rate !== null)
    return {
      kind: 'guarded',
      readsReservations: reads,
      locks,
      rateSlot: rate === null ? null : { limit: rate },
      remember: idempotent,
    };
  if (idempotent || locks.reservation)
    return { kind: 'own_transaction', readsReservations: reads, locks, remember: idempotent };
  return { kind: 'batched', readsReservations: reads };
}
