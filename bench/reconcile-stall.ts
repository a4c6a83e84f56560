/**
 * Does the periodic reconcile stall calls? The daemon (Postgres + Redis, as the soak runs it) with
 * a short `RUNGUARD_RECONCILE_INTERVAL_MS`, today's history seeded with `--steps` priced steps in
 * one run (as a long soak leaves it), and proxied calls paced at `--rate` calls/s into one run for
 * `--minutes`. Meanwhile the daemon's Postgres sessions are sampled every 50 ms
 * (`pg_stat_activity`): which reconcile statement runs, for how long, and which sessions wait on a
 * lock. Prints each pass's statements and the calls' p99 in the seconds of a pass against the
 * others; `--json <file>` keeps the per-second figures.
 *
 *   npx tsx bench/reconcile-stall.ts --steps 1000000 --minutes 6 --interval-ms 120000 --rate 1000 [--daemon-root /tmp/base]
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { connect, createServices } from './lib/database.js';
import { cpuUs, startDaemon, startHelper } from './lib/processes.js';
import { apiHeaders, chatTarget, MODEL, setPricing, startRuns } from './lib/scenarios.js';
import { STEP_ALLOWED } from './lib/seed-decisions.js';
import { round, summarize } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    steps: { type: 'string', default: '1000000' },
    minutes: { type: 'string', default: '6' },
    'interval-ms': { type: 'string', default: '120000' },
    rate: { type: 'string', default: '1000' },
    connections: { type: 'string', default: '64' },
    'daemon-root': { type: 'string' },
    json: { type: 'string' },
  },
});
const steps = Number(flags.steps);
const seconds = Math.round(Number(flags.minutes) * 60);
const rate = Number(flags.rate);
const log = (line: string) => process.stdout.write(`${line}\n`);

/** Today's priced steps in one run of the key's workspace, finished over the last hour, and the counters that match them. */
async function seed(databaseUrl: string, n: number): Promise<void> {
  const db = await connect(databaseUrl);
  try {
    const { rows } = await db.query<{ workspace_id: string; key_id: string }>(
      'SELECT workspace_id, id AS key_id FROM api_keys ORDER BY created_at LIMIT 1',
    );
    const { workspace_id: workspaceId, key_id: keyId } = rows[0]!;
    // The daemon builds its late indexes in the background at start: let it finish (ANALYZE would deadlock with it).
    for (;;) {
      const built = await db.query(
        `SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 'runs_tagged' AND i.indisvalid`,
      );
      if (built.rowCount) break;
      await sleep(200);
    }
    await db.query('BEGIN');
    const run = await db.query<{ id: string }>(
      `INSERT INTO runs (id, workspace_id, user_id, status, decision, started_at, step_count, models)
       VALUES (gen_random_uuid(), $1, 'seeded-user', 'RUNNING', '{}'::json, now() - interval '1 hour', $2, ARRAY[$3])
       RETURNING id`,
      [workspaceId, n, MODEL],
    );
    await db.query(
      `INSERT INTO steps (id, run_id, workspace_id, api_key_id, sequence, type, status, model, prompt_tokens, completion_tokens,
                          cost_usd, duration_ms, input_json, output_json, decision, created_at, finished_at)
       SELECT gen_random_uuid(), $1, $2, $3, s, 'MODEL_CALL', 'COMPLETED', $4, 500, 100, 500 * 0.00000015 + 100 * 0.0000006,
         700, '{"prompt":"seeded"}'::json, '{"finish_reason":"stop"}'::json, $5::json,
         now() - interval '1 hour' + s * (interval '50 minutes' / $6::int), now() - interval '1 hour' + s * (interval '50 minutes' / $6::int)
       FROM generate_series(1, $6::int) s`,
      [run.rows[0]!.id, workspaceId, keyId, MODEL, STEP_ALLOWED, n],
    );
    await db.query('COMMIT');
    // The counters the daemon would have written for them: the first pass then finds no drift.
    const spend = Math.round((500 * 0.00000015 + 100 * 0.0000006) * 1_000_000) * n;
    const day = `(now() AT TIME ZONE 'UTC')::date`;
    await db.query(
      `INSERT INTO usage_daily AS d (workspace_id, day, spend_micros, runs) VALUES ($1, ${day}, $2, 1)
       ON CONFLICT (workspace_id, day) DO UPDATE SET spend_micros = d.spend_micros + $2, runs = d.runs + 1`,
      [workspaceId, spend],
    );
    await db.query(
      `INSERT INTO user_usage_daily (workspace_id, user_id, day, spend_micros, runs) VALUES ($1, 'seeded-user', ${day}, $2, 1)`,
      [workspaceId, spend],
    );
    await db.query(
      `INSERT INTO subject_usage_daily AS d (workspace_id, subject, day, spend_micros) VALUES ($1, 'key:' || $3, ${day}, $2)
       ON CONFLICT (workspace_id, subject, day) DO UPDATE SET spend_micros = d.spend_micros + $2`,
      [workspaceId, spend, keyId],
    );
    await db.query('ANALYZE steps');
    await db.query('ANALYZE runs');
  } finally {
    await db.end();
  }
}

interface Sample {
  atS: number;
  /** Reconcile statements running (their first words), and sessions waiting on a lock. */
  reconcile: string[];
  lockWaits: number;
  /** CPU of the database's backends so far, clock ticks (10 ms). */
  pgTicks: number;
  /** Parallel workers running in the database (a recount's scan may take both cores). */
  parallel: number;
}

/** What the daemon's sessions do, every 50 ms, until stopped. */
function sampleSessions(databaseUrl: string, t0: number) {
  const samples: Sample[] = [];
  /** CPU ticks of every backend of the database seen so far (parallel workers come and go). */
  const ticks = new Map<number, number>();
  let running = true;
  const done = (async () => {
    const db = await connect(databaseUrl);
    try {
      while (running) {
        const { rows: all } = await db.query<{
          query: string;
          wait_event_type: string | null;
          state: string;
          backend_type: string;
          pid: number;
        }>(
          `SELECT query, wait_event_type, state, backend_type, pid FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()`,
        );
        const rows = all.filter((r) => r.backend_type === 'client backend');
        const parallel = all.filter((r) => r.backend_type === 'parallel worker').length;
        const atS = (performance.now() - t0) / 1000;
        for (const r of all) {
          const stat = await readFile(`/proc/${r.pid}/stat`, 'utf8').catch(() => null);
          // utime and stime, clock ticks (fields 14 and 15, after the command's parentheses).
          const fields = stat?.slice(stat.lastIndexOf(')') + 2).split(' ');
          if (fields) ticks.set(r.pid, Number(fields[11]) + Number(fields[12]));
        }
        const reconcile = rows
          .filter(
            (r) =>
              r.state === 'active' &&
              /reconcile_tally|WITH expected AS|AS user_spend|d.spend_micros AS spend/.test(r.query),
          )
          .map((r) => r.query.replace(/\s+/g, ' ').trim().slice(0, 60));
        samples.push({
          atS,
          pgTicks: [...ticks.values()].reduce((a, b) => a + b, 0),
          reconcile,
          parallel,
          lockWaits: rows.filter((r) => r.wait_event_type === 'Lock').length,
        });
        await sleep(50);
      }
    } finally {
      await db.end();
    }
  })();
  return {
    samples,
    async stop() {
      running = false;
      await done;
    },
  };
}

async function main(): Promise<void> {
  const upstream = await startHelper('upstream-server.ts', ['0', '1']);
  const services = await createServices();
  const dataDir = await mkdtemp(join(tmpdir(), 'runguard-bench-'));
  const daemon = await startDaemon({
    databaseUrl: services.databaseUrl,
    redisUrl: services.redisUrl,
    redisKeyPrefix: services.redisKeyPrefix,
    dataDir,
    openaiUpstream: `${upstream.url}/v1`,
    providers: { 'bench-0ms': { type: 'openai', upstream: `${upstream.url}/v1` } },
    env: { RUNGUARD_RECONCILE_INTERVAL_MS: flags['interval-ms'] },
    ...(flags['daemon-root'] ? { root: flags['daemon-root'] } : {}),
  });
  const api = new Pool(daemon.url, {
    connections: Number(flags.connections),
    pipelining: 1,
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
  });
  try {
    await setPricing(daemon);
    const t = performance.now();
    await seed(services.databaseUrl, steps);
    log(
      `seeded ${steps} priced steps in ${((performance.now() - t) / 1000).toFixed(1)} s; daemon ${daemon.pid} (${flags['daemon-root'] ?? 'this checkout'})`,
    );
    const runId = (await startRuns(api, apiHeaders(daemon), 1, 'stall'))[0]!;
    const target = chatTarget(daemon, runId, undefined, 'bench-0ms');
    const request = {
      method: 'POST' as const,
      path: new URL(target.url).pathname,
      headers: target.headers,
      body: target.body,
    };

    const latencies: number[][] = Array.from({ length: seconds }, () => []);
    const cpu: number[] = [];
    let errors = 0;
    let sent = 0;
    let pending = 0;
    const load = [loadavg()[0]!];
    const t0 = performance.now();
    const sessions = sampleSessions(services.databaseUrl, t0);
    let lastCpu = await cpuUs(daemon.pid);
    const cpuTimer = setInterval(() => {
      void cpuUs(daemon.pid).then((now) => {
        cpu.push(now - lastCpu);
        lastCpu = now;
      });
    }, 1000);
    for (;;) {
      const elapsed = performance.now() - t0;
      if (elapsed >= seconds * 1000) break;
      const second = Math.floor(elapsed / 1000);
      while (sent < Math.floor((elapsed / 1000) * rate)) {
        sent++;
        pending++;
        const due = performance.now();
        api
          .request(request)
          .then(
            async (res) => {
              await res.body.dump();
              if (res.statusCode >= 200 && res.statusCode < 300) latencies[second]!.push(performance.now() - due);
              else errors++;
            },
            () => errors++,
          )
          .finally(() => pending--);
      }
      await sleep(5);
    }
    while (pending > 0) await sleep(10);
    clearInterval(cpuTimer);
    await sessions.stop();
    load.push(loadavg()[0]!);

    // A second is in a pass if a reconcile statement was seen running in it.
    const inPass = new Array<boolean>(seconds).fill(false);
    const passes: { fromS: number; toS: number; statements: Map<string, number>; parallel: number }[] = [];
    let lastSeen = -10;
    for (const s of sessions.samples) {
      if (s.reconcile.length === 0) continue;
      if (s.atS - lastSeen > 2) passes.push({ fromS: s.atS, toS: s.atS, statements: new Map(), parallel: 0 });
      const pass = passes.at(-1)!;
      pass.toS = s.atS;
      pass.parallel = Math.max(pass.parallel, s.parallel);
      for (const q of s.reconcile) pass.statements.set(q, (pass.statements.get(q) ?? 0) + 0.05);
      lastSeen = s.atS;
      if (Math.floor(s.atS) < seconds) inPass[Math.floor(s.atS)] = true;
    }
    const pgTicksAt = (second: number) =>
      10 * (sessions.samples.filter((x) => x.atS <= second).at(-1)?.pgTicks ?? sessions.samples[0]?.pgTicks ?? 0);
    const perSecond = latencies.map((list, i) => {
      const sum = summarize(list);
      return {
        second: i,
        calls: list.length,
        p50: round(sum.p50, 2),
        p99: round(sum.p99, 2),
        max: round(list.length ? Math.max(...list) : 0, 1),
        cpuMs: round((cpu[i] ?? 0) / 1000, 0),
        pgCpuMs: pgTicksAt(i + 1) - pgTicksAt(i),
        reconcile: inPass[i],
        lockWaits: sessions.samples.filter((s) => Math.floor(s.atS) === i).reduce((n, s) => n + s.lockWaits, 0),
      };
    });
    // The calls due from the pass's start to 2 s after its end (a queue drains after it).
    const near = (i: number) => passes.some((p) => i >= Math.floor(p.fromS) && i <= Math.ceil(p.toS) + 2);
    const pooled = (pick: (i: number) => boolean) => summarize(latencies.filter((_, i) => pick(i) && i >= 10).flat());
    const during = pooled(near);
    const outside = pooled((i) => !near(i));
    for (const [n, p] of passes.entries()) {
      const window = latencies.slice(Math.floor(p.fromS), Math.ceil(p.toS) + 3).flat();
      log(
        `pass ${n + 1}: ${p.fromS.toFixed(1)}-${p.toS.toFixed(1)} s (${(p.toS - p.fromS + 0.05).toFixed(2)} s seen, up to ${p.parallel} parallel workers); calls then p99 ${round(summarize(window).p99, 1)} ms, max ${round(Math.max(0, ...window), 1)} ms`,
      );
      for (const [q, s] of p.statements) log(`    ${s.toFixed(2)} s  ${q}`);
    }
    for (const row of perSecond.filter((r) => r.p99 > 3 * outside.p99 || r.reconcile))
      log(
        `  s ${row.second}: ${row.calls} calls, p50 ${row.p50} p99 ${row.p99} max ${row.max} ms, daemon CPU ${row.cpuMs} ms, Postgres CPU ${row.pgCpuMs} ms, reconcile ${row.reconcile}, lock waits ${row.lockWaits}`,
      );
    const meanOf = (rows: typeof perSecond, pick: (r: (typeof perSecond)[number]) => number) =>
      round(rows.reduce((a, r) => a + pick(r), 0) / Math.max(1, rows.length), 0);
    const inPassRows = perSecond.filter((r) => r.reconcile);
    const otherRows = perSecond.filter((r) => !near(r.second) && r.second >= 10);
    log(
      `Postgres CPU a second: ${meanOf(inPassRows, (r) => r.pgCpuMs)} ms in a pass's seconds, ${meanOf(otherRows, (r) => r.pgCpuMs)} elsewhere; ` +
        `daemon CPU ${meanOf(inPassRows, (r) => r.cpuMs)} against ${meanOf(otherRows, (r) => r.cpuMs)}; pass seconds ${inPassRows.length}`,
    );
    log(
      `calls ${sent}, errors ${errors}; p99 near a pass ${round(during.p99, 1)} ms (p50 ${round(during.p50, 2)}), elsewhere ${round(outside.p99, 1)} ms (p50 ${round(outside.p50, 2)}); load ${load.map((l) => l.toFixed(1)).join(' -> ')}`,
    );
    if (flags.json)
      await writeFile(
        flags.json,
        JSON.stringify(
          {
            flags,
            passes: passes.map((p) => ({ ...p, statements: Object.fromEntries(p.statements) })),
            perSecond,
            during,
            outside,
            load,
          },
          null,
          1,
        ),
      );
  } finally {
    await api.close();
    await daemon.stop();
    await upstream.stop();
    await services.drop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

await main();
