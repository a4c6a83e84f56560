/**
 * Hot counters the rules read: daily spend (workspace and user), allowed runs this month, and
 * RUNNING runs. Postgres keeps the durable truth (usage tables and run records, written in the
 * same transaction as the records they count); a counter store answers from it (SQL) or from a
 * fast atomic copy of it (Redis).
 */
import type { Queryable } from './db.js';

export interface CounterScope {
  workspaceId: string;
  userId: string;
  /** UTC day, `YYYY-MM-DD`. */
  day: string;
  /** UTC month, `YYYY-MM`. */
  month: string;
}

export interface Counters {
  workspaceDailySpendMicros: number;
  userDailySpendMicros: number;
  monthlyRuns: number;
  concurrentRuns: number;
}

export interface RunLimits {
  monthlyRunLimit: number | null;
  maxConcurrentRuns: number | null;
}

export interface Admission {
  admitted: boolean;
  /** The counters the admission was decided on (after the increment when admitted). */
  monthlyRuns: number;
  concurrentRuns: number;
}

export interface CounterStore {
  readonly kind: 'redis' | 'sql';
  read(scope: CounterScope): Promise<Counters>;
  /**
   * Checks the monthly and concurrency limits and takes a run slot, atomically with every other
   * admission of the workspace in any daemon. Called inside the transaction that records the run.
   */
  admitRun(tx: Queryable, scope: CounterScope, limits: RunLimits): Promise<Admission>;
  /** Gives back an admission whose transaction rolled back. */
  cancelAdmission(scope: CounterScope): Promise<void>;
  /** A RUNNING run ended (after its record committed). */
  runEnded(scope: CounterScope): Promise<void>;
  /** A step's cost was recorded (after its record committed). */
  spendAdded(scope: CounterScope, micros: number): Promise<void>;
  health(): Promise<void>;
  close(): Promise<void>;
}

export function scopeAt(now: Date, workspaceId: string, userId: string): CounterScope {
  const iso = now.toISOString();
  return { workspaceId, userId, day: iso.slice(0, 10), month: iso.slice(0, 7) };
}
