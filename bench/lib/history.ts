/**
 * History: do decisions and reads slow down as records pile up? Two databases, each with its own
 * daemon: one empty, one seeded with about a million steps in the same workspace. Both get the
 * same 1,000-step run for the detail read. Measurements alternate between them in rounds, so
 * machine noise hits both alike, and the seeded figures are reported as ratios of the empty ones.
 * Last, the seeded daemon reads a run of LARGE_RUN_STEPS steps once, its RSS sampled meanwhile.
 */
import type pg from 'pg';
import { connect } from './database.js';
import { json, loop, pool, read } from './loops.js';
import { rssMb, rssSampler, type DaemonProcess } from './processes.js';
import { MODEL, apiHeaders, setPricing, startRuns } from './scenarios.js';
import { RUN_ALLOWED, RUN_BLOCKED, STEP_ALLOWED } from './seed-decisions.js';
import { ratio, round, summarize, type LatencySummary } from './stats.js';

export interface SeedOptions {
  runs: number;
  users: number;
}

/** Steps of run number g: 5 to 35, about 20 on average; a blocked run has none. */
const STEPS_OF = (g: string) => `CASE WHEN ${g} % 97 = 0 THEN 0 ELSE 5 + (${g} * 7) % 31 END`;

/**
 * Runs of many users over the last few weeks, with model and tool steps, tokens, costs priced
 * like the pricing table, a few failures and blocked runs; then the daily usage rows the daemon
 * keeps with them. Set-based SQL: a million steps in well under a minute.
 */
export async function seedHistory(
  db: pg.Client,
  workspaceId: string,
  o: SeedOptions,
): Promise<{ runs: number; steps: number; seconds: number }> {
  const t0 = performance.now();
  await db.query('BEGIN');
  await db.query(
    `INSERT INTO runs (id, workspace_id, user_id, status, metadata, decision, started_at, ended_at, step_count, models)
     SELECT gen_random_uuid(), $1, 'user-' || (g % $3),
       CASE WHEN g % 97 = 0 THEN 'BLOCKED' WHEN g % 23 = 0 THEN 'FAILED' ELSE 'COMPLETED' END,
       jsonb_build_object('agent', 'support-bot', 'ticket', 'T-' || g, 'env', 'prod'),
       CASE WHEN g % 97 = 0 THEN $4::json ELSE $5::json END,
       t, t + CASE WHEN g % 97 = 0 THEN interval '0' ELSE interval '1 second' * (20 + g % 300) END, ${STEPS_OF('g')},
       -- The models its steps name, as the step inserts keep them (step 1 is always a model call).
       CASE WHEN g % 97 = 0 THEN '{}'::text[] ELSE ARRAY[$6] END
     FROM generate_series(1, $2::int) g, LATERAL (SELECT now() - interval '2 hours' - g * interval '37 seconds' AS t) x`,
    [workspaceId, o.runs, o.users, RUN_BLOCKED, RUN_ALLOWED, MODEL],
  );
  await db.query(
    `INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, model, tool_name, prompt_tokens,
                        completion_tokens, cached_prompt_tokens, cost_usd, duration_ms, input_json, output_json,
                        decision, created_at, finished_at)
     SELECT gen_random_uuid(), r.id, r.workspace_id, s,
       CASE WHEN s % 3 = 0 THEN 'TOOL_CALL' ELSE 'MODEL_CALL' END,
       CASE WHEN r.status = 'FAILED' AND s = r.steps THEN 'FAILED' ELSE 'COMPLETED' END,
       CASE WHEN s % 3 = 0 THEN NULL ELSE $2 END,
       CASE WHEN s % 3 = 0 THEN 'search_tickets' END,
       CASE WHEN s % 3 = 0 THEN NULL ELSE 200 + (s * 131) % 1800 END,
       CASE WHEN s % 3 = 0 THEN NULL ELSE 20 + (s * 53) % 400 END,
       CASE WHEN s % 3 = 0 THEN NULL ELSE 0 END,
       CASE WHEN s % 3 = 0 THEN NULL
            ELSE (200 + (s * 131) % 1800) * 0.00000015 + (20 + (s * 53) % 400) * 0.0000006 END,
       300 + (s * 97) % 2500,
       ('{"prompt":"Summarize ticket ' || s || '"}')::json,
       '{"finish_reason":"stop"}'::json,
       $3::json, r.started_at + s * interval '1 second', r.started_at + s * interval '1 second' + interval '800 ms'
     FROM (SELECT runs.*, ${STEPS_OF("substr(metadata->>'ticket', 3)::int")} AS steps FROM runs
           WHERE workspace_id = $1 AND user_id LIKE 'user-%') r,
       generate_series(1, r.steps) s
     WHERE r.steps > 0`,
    [workspaceId, MODEL, STEP_ALLOWED],
  );
  await db.query(
    `INSERT INTO sdk_users AS u (workspace_id, user_id, run_count, first_seen_at, last_seen_at)
     SELECT workspace_id, user_id, count(*) FILTER (WHERE status <> 'BLOCKED'), min(started_at), max(started_at)
     FROM runs WHERE workspace_id = $1 AND user_id LIKE 'user-%' GROUP BY workspace_id, user_id
     ON CONFLICT (workspace_id, user_id) DO UPDATE SET run_count = u.run_count + EXCLUDED.run_count`,
    [workspaceId],
  );
  await addUsage(db, workspaceId, (run) => `${run}.user_id LIKE 'user-%'`);
  await addRunTotals(db, workspaceId, (run) => `${run}.user_id LIKE 'user-%'`);
  await db.query('COMMIT');
  await db.query('VACUUM ANALYZE');
  const { rows } = await db.query<{ runs: string; steps: string }>(
    'SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM steps) AS steps',
  );
  return {
    runs: Number(rows[0]!.runs),
    steps: Number(rows[0]!.steps),
    seconds: round((performance.now() - t0) / 1000, 1),
  };
}

/**
 * The daily usage rows the daemon would have kept for the seeded runs that `runs` picks (an SQL
 * condition on the runs table, given its alias), counted as it counts them: a run on its start's
 * UTC day, a step's cost rounded to microdollars on its finish's UTC day. So `runguard reconcile`
 * finds no drift in them.
 */
async function addUsage(db: pg.Client, workspaceId: string, runs: (alias: string) => string): Promise<void> {
  for (const [table, key] of [
    ['usage_daily', ''],
    ['user_usage_daily', 'user_id,'],
  ] as const) {
    await db.query(
      `INSERT INTO ${table} AS d (workspace_id, ${key} day, spend_micros, runs)
       SELECT workspace_id, ${key} day, sum(spend), sum(runs) FROM (
         SELECT s.workspace_id, r.user_id, (s.finished_at AT TIME ZONE 'UTC')::date AS day, round(s.cost_usd * 1000000) AS spend, 0 AS runs
         FROM steps s JOIN runs r ON r.id = s.run_id
         WHERE s.workspace_id = $1 AND ${runs('r')} AND s.cost_usd IS NOT NULL
         UNION ALL
         SELECT r.workspace_id, r.user_id, (r.started_at AT TIME ZONE 'UTC')::date, 0, 1
         FROM runs r WHERE r.workspace_id = $1 AND ${runs('r')} AND r.status <> 'BLOCKED'
       ) x
       GROUP BY workspace_id, ${key} day
       ON CONFLICT (workspace_id, ${key} day) DO UPDATE SET spend_micros = d.spend_micros + EXCLUDED.spend_micros,
         runs = d.runs + EXCLUDED.runs`,
      [workspaceId],
    );
  }
}

/** The tokens and costs the daemon would have added to the totals of the seeded runs that `runs` picks (their step counts are written with them). */
async function addRunTotals(db: pg.Client, workspaceId: string, runs: (alias: string) => string): Promise<void> {
  await db.query(
    `INSERT INTO run_totals (run_id, total_tokens, total_cost_usd)
     SELECT s.run_id, sum(coalesce(s.prompt_tokens, 0) + coalesce(s.completion_tokens, 0)), coalesce(sum(s.cost_usd), 0)
     FROM steps s JOIN runs r ON r.id = s.run_id
     WHERE s.workspace_id = $1 AND ${runs('r')}
     GROUP BY s.run_id`,
    [workspaceId],
  );
}

/** One COMPLETED run with `steps` steps, for the run detail read; its id. */
export async function seedDetailRun(db: pg.Client, workspaceId: string, steps: number): Promise<string> {
  // One transaction: a daemon's periodic reconcile must not see the steps without their usage.
  await db.query('BEGIN');
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO runs (id, workspace_id, user_id, status, decision, started_at, ended_at, step_count, models)
     VALUES (gen_random_uuid(), $1, 'detail-user', 'COMPLETED', $2::json, now() - interval '1 hour', now() - interval '30 minutes', $3, ARRAY[$4])
     RETURNING id`,
    [workspaceId, RUN_ALLOWED, steps, MODEL],
  );
  const id = rows[0]!.id;
  await db.query(
    `INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, model, prompt_tokens, completion_tokens, cost_usd,
                        duration_ms, input_json, output_json, decision, created_at, finished_at)
     SELECT gen_random_uuid(), $1, $2, s, 'MODEL_CALL', 'COMPLETED', $3, 500, 100, 500 * 0.00000015 + 100 * 0.0000006,
       700, ('{"prompt":"Step ' || s || '"}')::json, '{"finish_reason":"stop"}'::json, $4::json,
       now() - interval '1 hour' + s * interval '1 second', now() - interval '1 hour' + s * interval '1 second'
     FROM generate_series(1, $5::int) s`,
    [id, workspaceId, MODEL, STEP_ALLOWED, steps],
  );
  await addUsage(db, workspaceId, (run) => `${run}.id = '${id}'`);
  await addRunTotals(db, workspaceId, (run) => `${run}.id = '${id}'`);
  await db.query('COMMIT');
  return id;
}

export async function workspaceOf(db: pg.Client): Promise<string> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM workspaces ORDER BY created_at LIMIT 1');
  return rows[0]!.id;
}

export interface HistorySide {
  stepCreate: LatencySummary;
  runList: LatencySummary;
  runDetail: LatencySummary;
  stepCreateOps: number;
}

/** Steps of the run read once at the end: far past a page of a run detail (1,000 steps). */
const LARGE_RUN_STEPS = 100_000;

/** One read of a large run's detail: its size and time, and the daemon's RSS around it. */
export interface LargeRunRead {
  steps: number;
  bytes: number;
  ms: number;
  rssBeforeMb: number;
  rssPeakMb: number;
  rssAfterMb: number;
}

export interface HistoryResult {
  seeded: { runs: number; steps: number; seconds: number };
  rounds: number;
  empty: HistorySide;
  full: HistorySide;
  /** full ÷ empty: 1.00 means no slower with the history. */
  ratios: { stepCreateP50: number; stepCreateP99: number; runListP99: number; runDetailP99: number };
  /** The step creation p50 ratio of each round's pair of cells: how far the pooled ratio is from the hour's noise. */
  stepCreateP50ByRound: number[];
  largeRun?: LargeRunRead;
}

export interface HistoryTarget {
  daemon: DaemonProcess;
  databaseUrl: string;
  detailRunId: string;
}

export async function prepareHistory(
  daemon: DaemonProcess,
  databaseUrl: string,
  seed: SeedOptions | null,
  log: (line: string) => void,
): Promise<{ target: HistoryTarget; seeded: { runs: number; steps: number; seconds: number } }> {
  const db = await connect(databaseUrl);
  try {
    const ws = await workspaceOf(db);
    await setPricing(daemon);
    const detailRunId = await seedDetailRun(db, ws, 1_000);
    let seeded = { runs: 1, steps: 1_000, seconds: 0 };
    if (seed) {
      log(`history: seeding ${seed.runs} runs of ${seed.users} users...`);
      seeded = await seedHistory(db, ws, seed);
      log(`history: ${seeded.runs} runs, ${seeded.steps} steps stored in ${seeded.seconds} s`);
    } else {
      await db.query('VACUUM ANALYZE');
    }
    return { target: { daemon, databaseUrl, detailRunId }, seeded };
  } finally {
    await db.end();
  }
}

/** Alternates short cells between the empty and the seeded daemon; pools each side's samples. */
export async function historyScenario(
  empty: HistoryTarget,
  full: HistoryTarget,
  seeded: HistoryResult['seeded'],
  rounds: number,
  cellS: number,
  log: (line: string) => void,
): Promise<HistoryResult> {
  type Side = { step: number[]; stepP50s: number[]; list: number[]; detail: number[]; ops: number[] };
  const sides = new Map<HistoryTarget, Side>([
    [empty, { step: [], stepP50s: [], list: [], detail: [], ops: [] }],
    [full, { step: [], stepP50s: [], list: [], detail: [], ops: [] }],
  ]);
  const runIds = new Map<HistoryTarget, string>();
  for (const t of [empty, full]) {
    const api = pool(t.daemon.url, 1);
    runIds.set(t, (await startRuns(api, apiHeaders(t.daemon), 1, 'history-steps'))[0]!);
    await api.close();
  }
  const sequence = new Map<HistoryTarget, number>([
    [empty, 0],
    [full, 0],
  ]);
  for (let r = 0; r < rounds; r++) {
    for (const t of r % 2 === 0 ? [empty, full] : [full, empty]) {
      const side = sides.get(t)!;
      const headers = apiHeaders(t.daemon);
      const api = pool(t.daemon.url, 1);
      const runId = runIds.get(t)!;
      const stepsBefore = side.step.length;
      const step = await loop(
        1,
        cellS,
        async () => {
          const n = sequence.get(t)! + 1;
          sequence.set(t, n);
          await json(
            api,
            'POST',
            `/v1/runs/${runId}/steps`,
            headers,
            { type: 'MODEL_CALL', sequence: n, model: MODEL },
            201,
          );
        },
        side.step,
      );
      side.ops.push(step.ops);
      side.stepP50s[r] = summarize(side.step.slice(stepsBefore)).p50;
      // Reads are timed to their last byte, not parsed (loops.ts `read`).
      await loop(
        1,
        cellS,
        async () => {
          await read(api, '/v1/runs?page=1&per_page=50', headers, 200);
        },
        side.list,
      );
      await loop(
        1,
        cellS,
        async () => {
          await read(api, `/v1/runs/${t.detailRunId}`, headers, 200);
        },
        side.detail,
      );
      await api.close();
    }
    log(`history: round ${r + 1}/${rounds} done`);
  }
  const view = (s: Side): HistorySide => ({
    stepCreate: summarize(s.step),
    runList: summarize(s.list),
    runDetail: summarize(s.detail),
    stepCreateOps: round(s.ops.reduce((a, b) => a + b, 0) / s.ops.length, 1),
  });
  const e = view(sides.get(empty)!);
  const f = view(sides.get(full)!);
  const result: HistoryResult = {
    seeded,
    rounds,
    empty: e,
    full: f,
    ratios: {
      stepCreateP50: ratio(f.stepCreate.p50, e.stepCreate.p50),
      stepCreateP99: ratio(f.stepCreate.p99, e.stepCreate.p99),
      runListP99: ratio(f.runList.p99, e.runList.p99),
      runDetailP99: ratio(f.runDetail.p99, e.runDetail.p99),
    },
    stepCreateP50ByRound: sides.get(full)!.stepP50s.map((p50, r) => ratio(p50, sides.get(empty)!.stepP50s[r]!)),
  };
  result.largeRun = await readLargeRun(full, LARGE_RUN_STEPS);
  log(
    `history: a ${LARGE_RUN_STEPS}-step run's detail, ${round(result.largeRun.bytes / 1e6, 1)} MB in ${result.largeRun.ms} ms: ` +
      `daemon RSS ${result.largeRun.rssBeforeMb} MB before, peak ${result.largeRun.rssPeakMb}, ${result.largeRun.rssAfterMb} after`,
  );
  log(
    `history: step create p50 ${e.stepCreate.p50.toFixed(2)} -> ${f.stepCreate.p50.toFixed(2)} ms (x${result.ratios.stepCreateP50}; by round x${result.stepCreateP50ByRound.join(', x')}), ` +
      `p99 ${e.stepCreate.p99.toFixed(2)} -> ${f.stepCreate.p99.toFixed(2)} ms (x${result.ratios.stepCreateP99}); ` +
      `run list p99 ${e.runList.p99.toFixed(2)} -> ${f.runList.p99.toFixed(2)} ms; run detail (1,000 steps) p99 ${e.runDetail.p99.toFixed(2)} -> ${f.runDetail.p99.toFixed(2)} ms`,
  );
  return result;
}

/** Seeds a run of `steps` steps into the target's database and reads its detail once, to the last byte. */
async function readLargeRun(t: HistoryTarget, steps: number): Promise<LargeRunRead> {
  const db = await connect(t.databaseUrl);
  let runId: string;
  try {
    runId = await seedDetailRun(db, await workspaceOf(db), steps);
    await db.query('VACUUM ANALYZE steps');
  } finally {
    await db.end();
  }
  const rssBeforeMb = await rssMb(t.daemon.pid);
  const sampler = rssSampler(t.daemon.pid, 20);
  const started = performance.now();
  const res = await fetch(`${t.daemon.url}/v1/runs/${runId}`, { headers: apiHeaders(t.daemon) });
  if (res.status !== 200) throw new Error(`the large run's detail answered ${res.status}`);
  let bytes = 0;
  for await (const chunk of res.body!) bytes += (chunk as Uint8Array).length;
  const ms = performance.now() - started;
  const { peak } = sampler.stop();
  return {
    steps,
    bytes,
    ms: round(ms, 0),
    rssBeforeMb: round(rssBeforeMb, 1),
    rssPeakMb: round(peak, 1),
    rssAfterMb: round(await rssMb(t.daemon.pid), 1),
  };
}
