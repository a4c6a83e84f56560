/**
 * The periodic reconcile's check, in slices: the same recount as `reconcile.ts`'s drift statements
 * (the daily counters against the run and step records, from the UTC day `from` on), but the
 * records are read a slice of time at a time, each slice's steps summed in Postgres by run, key
 * and local day into a temporary tally, and the counters compared with the tally at the end. One
 * repeatable-read transaction, so every slice and the counters are read from one snapshot, as one
 * statement reads them; no counter row is locked. A statement reads about `STEPS_PER_SLICE` steps,
 * and the caller may pause between slices: a day of millions of steps is no longer one statement
 * holding Postgres's cores for seconds while the calls' finish batches wait for CPU.
 */
import { SPEND_CAP_MICROS } from './counters/counters.js';
import type { Queryable } from './db.js';
import { driftStatement, localDay, SUBJECT_USAGE, USER_USAGE, WORKSPACE_USAGE, type DriftRow } from './reconcile.js';
import { STEP_SUBJECTS } from './subject-usage.js';

/** Steps (or runs) a slice aims at: tens of milliseconds of one core. */
export const STEPS_PER_SLICE = 20_000;
/** The first slice's span, and the bounds of its adaptation to the records' density. */
const FIRST_SPAN_MS = 60_000;
const MIN_SPAN_MS = 1_000;
const MAX_SPAN_MS = 6 * 3_600_000;

const TALLY = 'pg_temp.reconcile_tally';

/** Makes `tx` repeatable read, before its first statement: every slice of `tallyDrift` then reads one snapshot. */
export async function readOneSnapshot(tx: Queryable): Promise<void> {
  await tx.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
}

/**
 * A slice of the priced steps: the first $2 (null: all) finished from the instant $1 on, in the
 * order of their index, summed by run, key and local day. A full slice ends before its last
 * instant, whose steps may go on past the limit: they are the next slice's, which starts at `hi`
 * ('infinity' after the last slice). No step before `hi`: the slice's
 * steps all share that instant, read by TALLY_STEPS_AT.
 */
const TALLY_STEPS = `
  WITH c AS MATERIALIZED (
    SELECT s.workspace_id, s.run_id, s.api_key_id, s.finished_at, s.cost_usd FROM steps s
    WHERE s.cost_usd IS NOT NULL AND s.finished_at >= $1::timestamptz ORDER BY s.finished_at LIMIT $2
  ), edge AS (
    SELECT CASE WHEN $2::int IS NULL OR count(*) < $2 THEN 'infinity'::timestamptz ELSE max(finished_at) END AS hi FROM c
  ), s AS (
    SELECT c.workspace_id, c.run_id, c.api_key_id, ${localDay('c.finished_at')} AS day,
      least(round(c.cost_usd * 1000000), ${SPEND_CAP_MICROS})::bigint AS spend
    FROM c JOIN workspaces w ON w.id = c.workspace_id, edge WHERE c.finished_at < edge.hi
  ), tallied AS (
    INSERT INTO ${TALLY} (workspace_id, run_id, api_key_id, day, spend, runs)
    SELECT workspace_id, run_id, api_key_id, day, sum(spend), 0 FROM s WHERE day >= $3::date
    GROUP BY workspace_id, run_id, api_key_id, day
  )
  SELECT edge.hi::text AS hi, (SELECT count(*)::int FROM s) AS records FROM edge`;

/** The priced steps finished at the instant $1 exactly (more than a slice's limit of them), and the instant after it. */
const TALLY_STEPS_AT = `
  WITH s AS (
    SELECT s.workspace_id, s.run_id, s.api_key_id, ${localDay('s.finished_at')} AS day,
      least(round(s.cost_usd * 1000000), ${SPEND_CAP_MICROS})::bigint AS spend
    FROM steps s JOIN workspaces w ON w.id = s.workspace_id
    WHERE s.cost_usd IS NOT NULL AND s.finished_at = $1::timestamptz
  ), tallied AS (
    INSERT INTO ${TALLY} (workspace_id, run_id, api_key_id, day, spend, runs)
    SELECT workspace_id, run_id, api_key_id, day, sum(spend), 0 FROM s WHERE day >= $2::date
    GROUP BY workspace_id, run_id, api_key_id, day
  )
  SELECT ($1::timestamptz + interval '1 microsecond')::text AS hi, (SELECT count(*)::int FROM s) AS records`;

/** A slice of the runs started in [$1, $2), each counted once on its local day (blocked ones not). */
const TALLY_RUNS = `
  WITH r AS (
    SELECT r.workspace_id, r.id AS run_id, ${localDay('r.started_at')} AS day
    FROM workspaces w JOIN runs r ON r.workspace_id = w.id
    WHERE r.status <> 'BLOCKED' AND r.started_at >= $1 AND r.started_at < $2
  ), tallied AS (
    INSERT INTO ${TALLY} (workspace_id, run_id, api_key_id, day, spend, runs)
    SELECT workspace_id, run_id, NULL, day, 0, 1 FROM r WHERE day >= $3::date
  )
  SELECT count(*)::int AS records FROM r`;

/** The tally's sums by workspace and day, against usage_daily's: the drifted rows, as USAGE_DRIFT's. */
const TALLY_USAGE_DRIFT = driftStatement(
  WORKSPACE_USAGE,
  `SELECT workspace_id, day, least(sum(spend), ${SPEND_CAP_MICROS}) AS spend_micros, sum(runs) AS runs
   FROM ${TALLY} GROUP BY workspace_id, day`,
);

const TALLY_USER_USAGE_DRIFT = driftStatement(
  USER_USAGE,
  `SELECT t.workspace_id, r.user_id, t.day, least(sum(t.spend), ${SPEND_CAP_MICROS}) AS spend_micros, sum(t.runs) AS runs
   FROM ${TALLY} t JOIN runs r ON r.id = t.run_id GROUP BY t.workspace_id, r.user_id, t.day`,
);

/** The key and tag subjects' spend: the tally's step rows (a run's steps of one key, one row a day) expanded to their subjects. */
const TALLY_SUBJECT_USAGE_DRIFT = driftStatement(
  SUBJECT_USAGE,
  `SELECT t.workspace_id, x.subject, t.day, least(sum(t.spend), ${SPEND_CAP_MICROS}) AS spend_micros
   FROM (SELECT workspace_id, run_id, api_key_id, day, sum(spend) AS spend FROM ${TALLY} WHERE runs = 0
         GROUP BY workspace_id, run_id, api_key_id, day) t
     JOIN runs r ON r.id = t.run_id CROSS JOIN LATERAL unnest(${STEP_SUBJECTS('t', 'r')}) AS x(subject)
   GROUP BY t.workspace_id, x.subject, t.day`,
);

export interface TallyOptions {
  /** The first UTC day checked (its records are read from a day earlier: its local days start then in some zones). */
  from: string;
  /** Records a slice aims at. @default STEPS_PER_SLICE */
  perSlice?: number;
  /** Awaited between slices, told how long the last one took (the periodic job lets the calls' work run). */
  between?: (sliceMs: number) => Promise<void>;
}

export interface TallyResult {
  usage: DriftRow[];
  userUsage: DriftRow[];
  subjectUsage: DriftRow[];
  /** Statements that read records, and the records (priced steps and counted runs) they read. */
  slices: number;
  records: number;
}

/** Whether the index the steps' slices read exists: without it every slice would read the whole table. */
async function stepsIndexed(tx: Queryable): Promise<boolean> {
  const { rows } = await tx.query<{ valid: boolean }>(
    `SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE c.relname = 'steps_priced_finish' AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass('steps'))`,
  );
  return rows[0]?.valid === true;
}

/** The priced steps from `start` on, `perSlice` a statement (all in one without their index). */
async function tallySteps(tx: Queryable, start: Date, options: TallyOptions & { sliced: boolean }) {
  const perSlice = options.sliced ? (options.perSlice ?? STEPS_PER_SLICE) : null;
  let slices = 0;
  let records = 0;
  for (let lo = start.toISOString(); ;) {
    const started = performance.now();
    let { rows } = await tx.query<{ hi: string; records: number }>(TALLY_STEPS, [lo, perSlice, options.from]);
    slices++;
    // None before its last instant: all the slice's steps finished at that one instant.
    if (rows[0]!.hi !== 'infinity' && rows[0]!.records === 0) {
      ({ rows } = await tx.query<{ hi: string; records: number }>(TALLY_STEPS_AT, [rows[0]!.hi, options.from]));
      slices++;
    }
    records += rows[0]!.records;
    if (rows[0]!.hi === 'infinity') return { slices, records };
    lo = rows[0]!.hi;
    await options.between?.(performance.now() - started);
  }
}

/**
 * Reads the records of [start, on) a slice at a time with `statement`, each slice's span adapted
 * so that it reads about `perSlice` records; the last slice is open-ended (a record stamped ahead
 * of this clock is counted, as the one-statement recount counts it).
 */
async function tallySlices(
  tx: Queryable,
  statement: string,
  start: Date,
  end: Date,
  options: TallyOptions,
): Promise<{ slices: number; records: number }> {
  const perSlice = options.perSlice ?? STEPS_PER_SLICE;
  let slices = 0;
  let records = 0;
  let spanMs = FIRST_SPAN_MS;
  for (let lo = start.getTime(); ;) {
    const hi = Math.min(lo + spanMs, end.getTime());
    const last = hi >= end.getTime();
    const started = performance.now();
    const { rows } = await tx.query<{ records: number }>(statement, [
      new Date(lo),
      last ? 'infinity' : new Date(hi),
      options.from,
    ]);
    slices++;
    const read = rows[0]!.records;
    records += read;
    if (last) return { slices, records };
    lo = hi;
    spanMs = Math.min(
      MAX_SPAN_MS,
      Math.max(MIN_SPAN_MS, Math.round((spanMs * perSlice) / Math.max(read, perSlice / 8))),
    );
    if (read > 0) await options.between?.(performance.now() - started);
  }
}

/**
 * The counters' drift since the UTC day `from`, read in slices in the transaction `tx`, which must
 * be repeatable read (`readOneSnapshot`, before its first statement) for the slices to be one snapshot.
 * Reports; repairs nothing.
 */
export async function tallyDrift(tx: Queryable, now: Date, options: TallyOptions): Promise<TallyResult> {
  await tx.query(
    `CREATE TEMPORARY TABLE reconcile_tally (workspace_id uuid NOT NULL, run_id uuid NOT NULL, api_key_id uuid,
       day date NOT NULL, spend bigint NOT NULL, runs integer NOT NULL) ON COMMIT DROP`,
  );
  // From the day before `from`, UTC: the earliest instant of the local day `from` in any zone.
  const start = new Date(Date.parse(`${options.from}T00:00:00Z`) - 86_400_000);
  // The last slices end a minute ahead of `now`, then open: a daemon's clock can be ahead of ours.
  const end = new Date(now.getTime() + 60_000);
  const steps = await tallySteps(tx, start, { ...options, sliced: await stepsIndexed(tx) });
  const runs = await tallySlices(tx, TALLY_RUNS, start, end, options);
  return {
    usage: (await tx.query<DriftRow>(TALLY_USAGE_DRIFT, [options.from])).rows,
    userUsage: (await tx.query<DriftRow>(TALLY_USER_USAGE_DRIFT, [options.from])).rows,
    subjectUsage: (await tx.query<DriftRow>(TALLY_SUBJECT_USAGE_DRIFT, [options.from])).rows,
    slices: steps.slices + runs.slices,
    records: steps.records + runs.records,
  };
}
