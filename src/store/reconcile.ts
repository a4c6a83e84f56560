/**
 * Reconciliation's statements (the job is `jobs/reconcile.ts`): the daily usage counters and
 * the run list's counts recounted from the run and step records, each difference as a row of its
 * expected and found values, and the repairs that add those differences to the counters.
 */
import { SPEND_CAP_MICROS } from './counters/counters.js';
import type { Queryable } from './db.js';
import { STEP_SUBJECTS } from './subject-usage.js';

/** A drifted counter: its key columns, and `expected_*` against `found_*` values, as Postgres's text. */
export type DriftRow = Record<string, string>;

/** The local day of a timestamp column in its workspace's time zone (`w`), whatever the session's. */
export const localDay = (column: string) => `(${column} AT TIME ZONE w.time_zone)::date`;
/**
 * An instant before the first instant of the local day $1 in any zone (UTC-12 to UTC+14): the
 * records are read from there, and counted from their local day $1 on.
 */
const FROM_INSTANT = `(($1::date - 1)::timestamp AT TIME ZONE 'UTC')`;

/** A daily counter table: the columns that key a row besides its day, and whether it counts runs. */
export interface DailyCounter {
  table: string;
  keys: readonly string[];
  runs: boolean;
}

export const WORKSPACE_USAGE: DailyCounter = { table: 'usage_daily', keys: ['workspace_id'], runs: true };
export const USER_USAGE: DailyCounter = { table: 'user_usage_daily', keys: ['workspace_id', 'user_id'], runs: true };
/** The daily spend of key and tag budgets' subjects (`STEP_SUBJECTS`): spend only, no runs. */
export const SUBJECT_USAGE: DailyCounter = {
  table: 'subject_usage_daily',
  keys: ['workspace_id', 'subject'],
  runs: false,
};

/**
 * The rows of `counter` (from the local day $1 on) that differ from `expected`, a query of its keys,
 * `day`, `spend_micros` and (counting runs) `runs`: one statement, so one snapshot, each row as a
 * `DriftRow` of expected and found values.
 */
export function driftStatement(counter: DailyCounter, expected: string): string {
  const keys = [...counter.keys, 'day'];
  const keyColumns = counter.keys.map((key) => `coalesce(e.${key}, d.${key}) AS ${key}`);
  keyColumns.push('coalesce(e.day, d.day)::text AS day');
  const runs = counter.runs
    ? 'coalesce(e.runs, 0) AS expected_runs, coalesce(d.runs, 0) AS found_runs'
    : '0 AS expected_runs, 0 AS found_runs';
  const runsDiffer = counter.runs ? ' OR coalesce(e.runs, 0) <> coalesce(d.runs, 0)' : '';
  return `
  WITH expected AS (${expected})
  SELECT ${keyColumns.join(', ')},
    coalesce(e.spend_micros, 0) AS expected_spend, coalesce(d.spend_micros, 0) AS found_spend, ${runs}
  FROM expected e FULL JOIN (SELECT * FROM ${counter.table} WHERE day >= $1::date) d
    ON ${keys.map((key) => `d.${key} = e.${key}`).join(' AND ')}
  WHERE coalesce(e.spend_micros, 0) <> coalesce(d.spend_micros, 0)${runsDiffer}`;
}

export const USAGE_DRIFT = driftStatement(
  WORKSPACE_USAGE,
  `
    SELECT workspace_id, day, least(sum(spend), ${SPEND_CAP_MICROS}) AS spend_micros, sum(runs) AS runs FROM (
      SELECT s.workspace_id, ${localDay('s.finished_at')} AS day, least(round(s.cost_usd * 1000000), ${SPEND_CAP_MICROS})::bigint AS spend, 0 AS runs
        FROM steps s JOIN workspaces w ON w.id = s.workspace_id WHERE s.cost_usd IS NOT NULL AND s.finished_at >= ${FROM_INSTANT}
      UNION ALL
      SELECT r.workspace_id, ${localDay('r.started_at')}, 0, 1 FROM runs r JOIN workspaces w ON w.id = r.workspace_id
        WHERE r.status <> 'BLOCKED' AND r.started_at >= ${FROM_INSTANT}
    ) x WHERE day >= $1::date GROUP BY workspace_id, day`,
);

export const USER_USAGE_DRIFT = driftStatement(
  USER_USAGE,
  `
    SELECT workspace_id, user_id, day, least(sum(spend), ${SPEND_CAP_MICROS}) AS spend_micros, sum(runs) AS runs FROM (
      SELECT s.workspace_id, r.user_id, ${localDay('s.finished_at')} AS day, least(round(s.cost_usd * 1000000), ${SPEND_CAP_MICROS})::bigint AS spend, 0 AS runs
        FROM steps s JOIN runs r ON r.id = s.run_id JOIN workspaces w ON w.id = s.workspace_id
        WHERE s.cost_usd IS NOT NULL AND s.finished_at >= ${FROM_INSTANT}
      UNION ALL
      SELECT r.workspace_id, r.user_id, ${localDay('r.started_at')}, 0, 1 FROM runs r JOIN workspaces w ON w.id = r.workspace_id
        WHERE r.status <> 'BLOCKED' AND r.started_at >= ${FROM_INSTANT}
    ) x WHERE day >= $1::date GROUP BY workspace_id, user_id, day`,
);

export const SUBJECT_USAGE_DRIFT = driftStatement(
  SUBJECT_USAGE,
  `
    SELECT workspace_id, subject, day, least(sum(spend), ${SPEND_CAP_MICROS}) AS spend_micros FROM (
      SELECT s.workspace_id, x.subject, ${localDay('s.finished_at')} AS day, least(round(s.cost_usd * 1000000), ${SPEND_CAP_MICROS})::bigint AS spend
        FROM steps s JOIN runs r ON r.id = s.run_id JOIN workspaces w ON w.id = s.workspace_id
          CROSS JOIN LATERAL unnest(${STEP_SUBJECTS('s', 'r')}) AS x(subject)
        WHERE s.cost_usd IS NOT NULL AND s.finished_at >= ${FROM_INSTANT}
    ) x WHERE day >= $1::date GROUP BY workspace_id, subject, day`,
);

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

/** The daily usage counters (by workspace) that differ from the records since the UTC day `from`. */
export async function usageDrift(db: Queryable, from: string): Promise<DriftRow[]> {
  return (await db.query<DriftRow>(USAGE_DRIFT, [from])).rows;
}

/** The daily usage counters by user that differ from the records since the UTC day `from`. */
export async function userUsageDrift(db: Queryable, from: string): Promise<DriftRow[]> {
  return (await db.query<DriftRow>(USER_USAGE_DRIFT, [from])).rows;
}

/** The daily spend by subject (key and tag budgets') that differs from the records since the UTC day `from`. */
export async function subjectUsageDrift(db: Queryable, from: string): Promise<DriftRow[]> {
  return (await db.query<DriftRow>(SUBJECT_USAGE_DRIFT, [from])).rows;
}

/** The run list's counts that differ from the runs. */
export async function runCountDrift(db: Queryable): Promise<DriftRow[]> {
  return (await db.query<DriftRow>(RUN_COUNT_DRIFT)).rows;
}

/** Each drifted count's difference, added to its shard 0 (as the migration's count), in key order. */
export async function addCountDifferences(tx: Queryable, rows: DriftRow[]) {
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
  subject_usage_daily: [
    ['workspace_id', 'uuid'],
    ['subject', 'text'],
    ['day', 'date'],
  ],
} as const;

/** Adds each drifted row's expected minus found to the row as it stands, upserted in key order. */
export async function addDifferences(tx: Queryable, table: keyof typeof DAILY_KEYS, rows: DriftRow[]) {
  if (rows.length === 0) return;
  const keys = DAILY_KEYS[table];
  const columns = keys.map(([column]) => column).join(', ');
  const difference = (field: 'spend' | 'runs') =>
    rows.map((row) => String(BigInt(row[`expected_${field}`]!) - BigInt(row[`found_${field}`]!)));
  // The subjects' rows count spend only.
  const runs = table !== 'subject_usage_daily';
  await tx.query(
    `INSERT INTO ${table} AS d (${columns}, spend_micros${runs ? ', runs' : ''})
     SELECT * FROM unnest(${keys.map(([, type], i) => `$${i + 1}::${type}[]`).join(', ')}, $${keys.length + 1}::bigint[]${runs ? `, $${keys.length + 2}::integer[]` : ''})
     ORDER BY ${keys.map((_, i) => i + 1).join(', ')}
     ON CONFLICT (${columns}) DO UPDATE SET spend_micros = least(d.spend_micros + EXCLUDED.spend_micros, ${SPEND_CAP_MICROS})${runs ? ', runs = d.runs + EXCLUDED.runs' : ''}`,
    [
      ...keys.map(([column]) => rows.map((row) => row[column])),
      difference('spend'),
      ...(runs ? [difference('runs')] : []),
    ],
  );
}

/** Today is each workspace's local day of the instant $1. */
const TODAYS_SPEND = `
  SELECT u.workspace_id, u.user_id, ws.time_zone, u.day::text AS day, coalesce(w.spend_micros, 0) AS ws_spend,
    u.spend_micros AS user_spend
  FROM user_usage_daily u JOIN workspaces ws ON ws.id = u.workspace_id
  LEFT JOIN usage_daily w ON w.workspace_id = u.workspace_id AND w.day = u.day
  WHERE u.day >= ($1::timestamptz AT TIME ZONE 'UTC')::date - 1 AND u.day = ($1::timestamptz AT TIME ZONE ws.time_zone)::date
    AND u.spend_micros > 0`;

export interface TodaysSpendRow {
  workspace_id: string;
  user_id: string;
  time_zone: string;
  day: string;
  ws_spend: string;
  user_spend: string;
}

/** Today's recorded spend (each workspace's local day of `now`) of every user who spent, with their workspace's. */
export async function readTodaysSpend(db: Queryable, now: Date): Promise<TodaysSpendRow[]> {
  return (await db.query<TodaysSpendRow>(TODAYS_SPEND, [now])).rows;
}

/** Today's recorded spend (each workspace's local day of `now`) of every key and tag budgets' subject that spent. */
export async function readTodaysSubjectSpend(
  db: Queryable,
  now: Date,
): Promise<{ workspace_id: string; time_zone: string; subject: string; spend: string }[]> {
  const { rows } = await db.query<{ workspace_id: string; time_zone: string; subject: string; spend: string }>(
    `SELECT d.workspace_id, ws.time_zone, d.subject, d.spend_micros AS spend
     FROM subject_usage_daily d JOIN workspaces ws ON ws.id = d.workspace_id
     WHERE d.day >= ($1::timestamptz AT TIME ZONE 'UTC')::date - 1 AND d.day = ($1::timestamptz AT TIME ZONE ws.time_zone)::date
       AND d.spend_micros > 0`,
    [now],
  );
  return rows;
}
