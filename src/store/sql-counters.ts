/**
 * The counter store for a daemon without Redis: it reads the durable counters directly, and
 * serializes the admissions of a workspace with a transaction-scoped advisory lock, so that
 * the check and the run record it admits commit together.
 */
import type { Queryable } from './db.js';
import type { Admission, CounterScope, Counters, CounterStore, RunLimits } from './counters.js';

interface RunCountsRow {
  monthly: string | number;
  running: string | number;
}

const RUN_COUNTS = `
  (SELECT coalesce(sum(runs), 0) FROM usage_daily
    WHERE workspace_id = $1 AND day >= $2::date AND day < ($2::date + interval '1 month')) AS monthly,
  (SELECT count(*) FROM runs WHERE workspace_id = $1 AND status = 'RUNNING') AS running`;

export class SqlCounters implements CounterStore {
  readonly kind = 'sql';

  constructor(private readonly db: Queryable) {}

  async read(scope: CounterScope): Promise<Counters> {
    const { rows } = await this.db.query<RunCountsRow & { ws_spend: string | null; user_spend: string | null }>(
      `SELECT ${RUN_COUNTS},
        (SELECT spend_micros FROM usage_daily WHERE workspace_id = $1 AND day = $3) AS ws_spend,
        (SELECT spend_micros FROM user_usage_daily WHERE workspace_id = $1 AND user_id = $4 AND day = $3) AS user_spend`,
      [scope.workspaceId, `${scope.month}-01`, scope.day, scope.userId],
    );
    const row = rows[0]!;
    return {
      workspaceDailySpendMicros: Number(row.ws_spend ?? 0),
      userDailySpendMicros: Number(row.user_spend ?? 0),
      monthlyRuns: Number(row.monthly),
      concurrentRuns: Number(row.running),
    };
  }

  /** The durable run counts of a workspace, for a Redis copy to rebuild from. */
  async runCounts(db: Queryable, scope: CounterScope): Promise<{ monthlyRuns: number; concurrentRuns: number }> {
    const { rows } = await db.query<RunCountsRow>(`SELECT ${RUN_COUNTS}`, [scope.workspaceId, `${scope.month}-01`]);
    return { monthlyRuns: Number(rows[0]!.monthly), concurrentRuns: Number(rows[0]!.running) };
  }

  async admitRun(tx: Queryable, scope: CounterScope, limits: RunLimits): Promise<Admission> {
    // Held until the transaction ends: the next admission sees this one's run record.
    await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('admit:' || $1, 0))`, [scope.workspaceId]);
    const counts = await this.runCounts(tx, scope);
    const full =
      (limits.monthlyRunLimit !== null && counts.monthlyRuns >= limits.monthlyRunLimit) ||
      (limits.maxConcurrentRuns !== null && counts.concurrentRuns >= limits.maxConcurrentRuns);
    if (full) return { admitted: false, ...counts };
    // The caller's run record and usage row are the increment.
    return { admitted: true, monthlyRuns: counts.monthlyRuns + 1, concurrentRuns: counts.concurrentRuns + 1 };
  }

  async cancelAdmission(): Promise<void> {}
  async runEnded(): Promise<void> {}
  async spendAdded(): Promise<void> {}

  async health(): Promise<void> {
    await this.db.query('SELECT 1');
  }

  async close(): Promise<void> {}
}
