/**
 * Reconciliation: recounts what the daily usage counters should be from the run and step records,
 * reports every difference, and repairs it. (A run's own totals are not checked: recounting one
 * reads all its steps, however old, and a long run's would be read on every pass.) On demand
 * (`runCounts`), also the run list's counts by workspace and status, which reads every run. The
 * counters are written in the same transactions as the records, so a difference means a bug, a
 * hand edit or triggers switched off (`session_replication_role = replica`, a restore with
 * `--disable-triggers`); the Redis copy of spend can lag behind (a write lost in a crash) and is raised to the records.
 */
import type { Logger } from 'pino';
import { ADVISORY_LOCKS } from '../store/advisory-locks.js';
import { recordedSpend, scopeAt, SPEND_CAP_MICROS, type CounterStore, type DailySpend } from '../store/counters.js';
import type { Db, Queryable } from '../store/db.js';

export interface Drift {
  kind: 'workspace_usage' | 'user_usage' | 'spend_copy' | 'run_count';
  key: string;
  expected: string;
  found: string;
}

export interface ReconcileReport {
  checkedFrom: string;
  drifts: Drift[];
  repaired: boolean;
  /** Another reconcile held the lock, and this one was told not to wait: nothing was checked. */
  skipped?: boolean;
}

/** UTC day of a timestamp column, whatever the session's time zone. */
const utcDay = (column: string) => `(${column} AT TIME ZONE 'UTC')::date`;
/** The first instant of the UTC day $1 (a date alone compared with a timestamptz would be in the session's zone). */
const FROM_INSTANT = `($1::date::timestamp AT TIME ZONE 'UTC')`;

export const USAGE_DRIFT = `
  WITH expected AS (
    SELECT workspace_id, day, least(sum(spend), ${SPEND_CAP_MICROS}) AS spend_micros, sum(runs) AS runs FROM (
      SELECT workspace_id, ${utcDay('finished_at')} AS day, least(round(cost_usd * 1000000), ${SPEND_CAP_MICROS})::bigint AS spend, 0 AS runs
        FROM steps WHERE cost_usd IS NOT NULL AND finished_at >= ${FROM_INSTANT}
      UNION ALL
      SELECT workspace_id, ${utcDay('started_at')}, 0, 1 FROM runs WHERE status <> 'BLOCKED' AND started_at >= ${FROM_INSTANT}
    ) x GROUP BY workspace_id, day
  )
  SELECT coalesce(e.workspace_id, d.workspace_id) AS workspace_id, coalesce(e.day, d.day)::text AS day,
    coalesce(e.spend_micros, 0) AS expected_spend, coalesce(d.spend_micros, 0) AS found_spend,
    coalesce(e.runs, 0) AS expected_runs, coalesce(d.runs, 0) AS found_runs
  FROM expected e FULL JOIN (SELECT * FROM usage_daily WHERE day >= $1::date) d
    ON d.workspace_id = e.workspace_id AND d.day = e.day
  WHERE coalesce(e.spend_micros, 0) <> coalesce(d.spend_micros, 0) OR coalesce(e.runs, 0) <> coalesce(d.runs, 0)`;

export const USER_USAGE_DRIFT = `
  WITH expected AS (
    SELECT workspace_id, user_id, day, least(sum(spend), ${SPEND_CAP_MICROS}) AS spend_micros, sum(runs) AS runs FROM (
      SELECT s.workspace_id, r.user_id, ${utcDay('s.finished_at')} AS day, least(round(s.cost_usd * 1000000), ${SPEND_CAP_MICROS})::bigint AS spend, 0 AS runs
        FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.cost_usd IS NOT NULL AND s.finished_at >= ${FROM_INSTANT}
      UNION ALL
      SELECT workspace_id, user_id, ${utcDay('started_at')}, 0, 1 FROM runs WHERE status <> 'BLOCKED' AND started_at >= ${FROM_INSTANT}
    ) x GROUP BY workspace_id, user_id, day
  )
  SELECT coalesce(e.workspace_id, d.workspace_id) AS workspace_id, coalesce(e.user_id, d.user_id) AS user_id,
    coalesce(e.day, d.day)::text AS day, coalesce(e.spend_micros, 0) AS expected_spend, coalesce(d.spend_micros, 0) AS found_spend,
    coalesce(e.runs, 0) AS expected_runs, coalesce(d.runs, 0) AS found_runs
  FROM expected e FULL JOIN (SELECT * FROM user_usage_daily WHERE day >= $1::date) d
    ON d.workspace_id = e.workspace_id AND d.user_id = e.user_id AND d.day = e.day
  WHERE coalesce(e.spend_micros, 0) <> coalesce(d.spend_micros, 0) OR coalesce(e.runs, 0) <> coalesce(d.runs, 0)`;

/**
 * The run list's counts (migration 8) against the runs, by workspace and status: one statement,
 * so one snapshot, in which the triggers' counts and the runs they count agree.
 */
export const RUN_COUNT_DRIFT = `
  WITH expected AS (SELECT workspace_id, status, count(*) AS runs FROM runs GROUP BY workspace_id, status),
  found AS (SELECT workspace_id, status, sum(runs) AS runs FROM run_counts GROUP BY workspace_id, status)
  SELECT coalesce(e.workspace_id, f.workspace_id) AS workspace_id, coalesce(e.status, f.status) AS status,
    coalesce(e.runs, 0) AS expected_runs, coalesce(f.runs, 0) AS found_runs
  FROM expected e FULL JOIN found f ON f.workspace_id = e.workspace_id AND f.status = e.status
  WHERE coalesce(e.runs, 0) <> coalesce(f.runs, 0)`;

export async function reconcile(
  db: Db,
  counters: CounterStore,
  options: { now: Date; days: number; repair: boolean; runCounts?: boolean; waitForLock?: boolean },
): Promise<ReconcileReport> {
  const from = new Date(options.now.getTime() - (options.days - 1) * 86_400_000).toISOString().slice(0, 10);
  const drifts: Drift[] = [];
  const runCounts = options.runCounts ?? false;
  const checked = options.repair
    ? await checkAndRepair(db, from, runCounts, options.waitForLock ?? true)
    : await Promise.all([
        db.query<Record<string, string>>(USAGE_DRIFT, [from]),
        db.query<Record<string, string>>(USER_USAGE_DRIFT, [from]),
        runCounts ? db.query<Record<string, string>>(RUN_COUNT_DRIFT) : { rows: [] },
      ]).then(([usageDrift, userUsageDrift, countDrift]) => ({
        usage: usageDrift.rows,
        userUsage: userUsageDrift.rows,
        counts: countDrift.rows,
      }));
  if (!checked) return { checkedFrom: from, drifts, repaired: false, skipped: true };
  const { usage, userUsage, counts } = checked;
  for (const row of usage) {
    drifts.push({
      kind: 'workspace_usage',
      key: `${row.workspace_id}/${row.day}`,
      expected: `spend=${row.expected_spend} runs=${row.expected_runs}`,
      found: `spend=${row.found_spend} runs=${row.found_runs}`,
    });
  }
  for (const row of userUsage) {
    drifts.push({
      kind: 'user_usage',
      key: `${row.workspace_id}/${row.user_id}/${row.day}`,
      expected: `spend=${row.expected_spend} runs=${row.expected_runs}`,
      found: `spend=${row.found_spend} runs=${row.found_runs}`,
    });
  }
  for (const row of counts) {
    drifts.push({
      kind: 'run_count',
      key: `${row.workspace_id}/${row.status}`,
      expected: `runs=${row.expected_runs}`,
      found: `runs=${row.found_runs}`,
    });
  }
  // The Redis copy of today's spend, for every workspace and user who spent today.
  if (counters.kind === 'redis') drifts.push(...(await refreshSpendCopy(db, counters, options.now, options.repair)));
  return { checkedFrom: from, drifts, repaired: options.repair };
}

/**
 * Checks and repairs in one transaction, under the reconcile lock. Each drift is repaired by
 * adding its difference (expected minus found, both read by one statement, so from one snapshot)
 * to the counter as it is now: the writes committed since the check are already in it and stay,
 * and no counter row is held while the check reads the records. The lock keeps two reconciles from
 * applying the same difference twice. Rows are upserted in the order every writer locks them:
 * days sorted, then users' days sorted.
 */
async function checkAndRepair(db: Db, from: string, runCounts: boolean, waitForLock: boolean) {
  return db.transaction(async (tx) => {
    if (waitForLock) {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [ADVISORY_LOCKS.reconcile]);
    } else {
      const { rows } = await tx.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS locked', [
        ADVISORY_LOCKS.reconcile,
      ]);
      if (!rows[0]!.locked) return null;
    }
    const usage = (await tx.query<Record<string, string>>(USAGE_DRIFT, [from])).rows;
    const userUsage = (await tx.query<Record<string, string>>(USER_USAGE_DRIFT, [from])).rows;
    const counts = runCounts ? (await tx.query<Record<string, string>>(RUN_COUNT_DRIFT)).rows : [];
    await addDifferences(tx, 'usage_daily', usage);
    await addDifferences(tx, 'user_usage_daily', userUsage);
    await addCountDifferences(tx, counts);
    return { usage, userUsage, counts };
  });
}

/** Each drifted count's difference, added to its shard 0 (as the migration's count), in key order. */
async function addCountDifferences(tx: Queryable, rows: Record<string, string>[]) {
  if (rows.length === 0) return;
  await tx.query(
    `INSERT INTO run_counts AS c (workspace_id, status, shard, runs)
     SELECT workspace_id, status, 0, runs FROM unnest($1::uuid[], $2::text[], $3::bigint[]) AS d(workspace_id, status, runs)
     ORDER BY workspace_id, status
     ON CONFLICT (workspace_id, status, shard) DO UPDATE SET runs = c.runs + EXCLUDED.runs`,
    [
      rows.map((row) => row.workspace_id),
      rows.map((row) => row.status),
      rows.map((row) => String(BigInt(row.expected_runs!) - BigInt(row.found_runs!))),
    ],
  );
}

/** Each daily table's key columns and their types. */
const DAILY_KEYS = {
  usage_daily: [
    ['workspace_id', 'uuid'],
    ['day', 'date'],
  ],
  user_usage_daily: [
    ['workspace_id', 'uuid'],
    ['user_id', 'text'],
    ['day', 'date'],
  ],
} as const;

/** Adds each drifted row's expected minus found to the row as it stands, upserted in key order. */
async function addDifferences(tx: Queryable, table: keyof typeof DAILY_KEYS, rows: Record<string, string>[]) {
  if (rows.length === 0) return;
  const keys = DAILY_KEYS[table];
  const columns = keys.map(([column]) => column).join(', ');
  const difference = (field: 'spend' | 'runs') =>
    rows.map((row) => String(BigInt(row[`expected_${field}`]!) - BigInt(row[`found_${field}`]!)));
  await tx.query(
    `INSERT INTO ${table} AS d (${columns}, spend_micros, runs)
     SELECT * FROM unnest(${keys.map(([, type], i) => `$${i + 1}::${type}[]`).join(', ')}, $${keys.length + 1}::bigint[], $${keys.length + 2}::integer[])
     ORDER BY ${keys.map((_, i) => i + 1).join(', ')}
     ON CONFLICT (${columns}) DO UPDATE SET spend_micros = least(d.spend_micros + EXCLUDED.spend_micros, ${SPEND_CAP_MICROS}),
       runs = d.runs + EXCLUDED.runs`,
    [...keys.map(([column]) => rows.map((row) => row[column])), difference('spend'), difference('runs')],
  );
}

const TODAYS_SPEND = `
  SELECT u.workspace_id, u.user_id, coalesce(w.spend_micros, 0) AS ws_spend, u.spend_micros AS user_spend
  FROM user_usage_daily u LEFT JOIN usage_daily w ON w.workspace_id = u.workspace_id AND w.day = u.day
  WHERE u.day = $1 AND u.spend_micros > 0`;

async function todaysSpend(
  db: Db,
  day: string,
): Promise<Map<string, DailySpend & { workspaceId: string; userId: string }>> {
  const { rows } = await db.query<{ workspace_id: string; user_id: string; ws_spend: string; user_spend: string }>(
    TODAYS_SPEND,
    [day],
  );
  return new Map(
    rows.map((row) => [
      `${row.workspace_id}/${row.user_id}`,
      {
        workspaceId: row.workspace_id,
        userId: row.user_id,
        workspaceDailySpendMicros: Number(row.ws_spend),
        userDailySpendMicros: Number(row.user_spend),
      },
    ]),
  );
}

/**
 * The Redis copy of today's spend against the records. The copy is raised after each commit, so
 * under load it is normally ahead of records read a moment before it, and behind records read a
 * moment after: only a copy below the records read before it (a raise lost), or above those read
 * after it (a hand edit, a bug), is a drift. A copy behind is raised, never set: setting it would
 * undo the raises that landed since the records were read, and decisions would read less spend
 * than is recorded. A copy above is set to the records, then raised to them read again.
 */
async function refreshSpendCopy(db: Db, counters: CounterStore, now: Date, repair: boolean): Promise<Drift[]> {
  const day = now.toISOString().slice(0, 10);
  const before = await todaysSpend(db, day);
  const copies = new Map<string, DailySpend>();
  for (const [key, recorded] of before) {
    copies.set(key, await counters.readSpend(scopeAt(now, recorded.workspaceId, recorded.userId)));
  }
  const after = await todaysSpend(db, day);
  const drifts: Drift[] = [];
  for (const [key, recorded] of before) {
    const scope = scopeAt(now, recorded.workspaceId, recorded.userId);
    const copy = copies.get(key)!;
    const later = after.get(key) ?? recorded;
    const behind =
      copy.workspaceDailySpendMicros < recorded.workspaceDailySpendMicros ||
      copy.userDailySpendMicros < recorded.userDailySpendMicros;
    const above =
      copy.workspaceDailySpendMicros > later.workspaceDailySpendMicros ||
      copy.userDailySpendMicros > later.userDailySpendMicros;
    if (!behind && !above) continue;
    drifts.push({
      kind: 'spend_copy',
      key: `${key}/${day}`,
      expected: `${(above ? later : recorded).workspaceDailySpendMicros}/${(above ? later : recorded).userDailySpendMicros}`,
      found: `${copy.workspaceDailySpendMicros}/${copy.userDailySpendMicros}`,
    });
    if (!repair) continue;
    // Set, then raised to the records read again: a step's raise that landed between the read
    // and the set was undone by it, and is redone (a raise never lowers a copy).
    if (above) await counters.resyncSpend(scope, await recordedSpend(db, scope));
    await counters.spendRecorded(scope, await recordedSpend(db, scope));
  }
  return drifts;
}

export interface PeriodicReconcile {
  start(): void;
  stop(): Promise<void>;
}

/**
 * Checks and repairs today's and yesterday's counters every `intervalMs` (0: never), logging what
 * it found. Several daemons may run it: a pass that finds another's check under way (its lock
 * held) skips, rather than wait to do the same work again.
 */
export function periodicReconcile(options: {
  db: Db;
  counters: CounterStore;
  clock: { now(): Date };
  logger: Logger;
  intervalMs: number;
}): PeriodicReconcile {
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  const once = async () => {
    try {
      // Not waiting for another daemon's (or the CLI's) reconcile: it is doing the same work, and
      // a pass waiting on its lock would hold up this daemon's shutdown.
      const report = await reconcile(options.db, options.counters, {
        now: options.clock.now(),
        days: 2,
        repair: true,
        waitForLock: false,
      });
      if (report.drifts.length > 0)
        options.logger.warn(
          { drifts: report.drifts.slice(0, 50), count: report.drifts.length },
          'counters drifted from the records; repaired',
        );
    } catch (error) {
      options.logger.warn({ err: error }, 'reconciliation failed; it will be tried again');
    }
  };
  return {
    start() {
      if (options.intervalMs <= 0 || timer) return;
      timer = setInterval(() => {
        running ??= once().finally(() => (running = null));
      }, options.intervalMs);
      timer.unref();
    },
    async stop() {
      if (timer) clearInterval(timer);
      timer = null;
      await running;
    },
  };
}
