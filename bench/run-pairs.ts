/**
 * Run start + end pairs (`POST /v1/runs`, then `POST /v1/runs/<id>/end`), alternating the daemons
 * of several built checkouts in the same rounds, each on a fresh database of its own. The start
 * and the end are timed apart, and Postgres's busy sessions are sampled every 20 ms by what they
 * wait on (a row lock, the WAL), which shows where starts queue. With `--pairs steps`, each worker
 * repeats a step create + patch pair (a priced model step, so spend counters move) in a run of its
 * own instead, as the bench's run API cell does; the create and the patch are timed apart. Each
 * line also tells what a pair cost: the daemon's CPU and its database's Postgres backends' CPU
 * (schedstat, µs a pair; robust-ish on a busy machine, unlike pairs/s) and commits a pair.
 *
 *   npx tsx bench/run-pairs.ts [--roots /tmp/base,.] [--connections 16,64] [--rounds 2] [--duration 5]
 *                              [--pairs runs|steps] [--cpu-prof-dir DIR]
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ADMIN_DATABASE_URL, createServices, type BenchServices } from './lib/database.js';
import { json, loop, pool } from './lib/loops.js';
import { cpuUs, startDaemon, type DaemonProcess } from './lib/processes.js';
import { MODEL, setPricing, startRuns } from './lib/scenarios.js';
import { summarize } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    roots: { type: 'string', default: '.' },
    connections: { type: 'string', default: '16,64' },
    rounds: { type: 'string', default: '2' },
    duration: { type: 'string', default: '5' },
    pairs: { type: 'string', default: 'runs' },
    'cpu-prof-dir': { type: 'string' },
  },
});
if (flags.pairs !== 'runs' && flags.pairs !== 'steps') throw new Error('--pairs takes runs or steps');
const stepPairs = flags.pairs === 'steps';
const [first, second] = stepPairs ? ['create', 'patch'] : ['start', 'end'];
const roots = flags.roots.split(',').map((r) => resolve(r));
const connections = flags.connections.split(',').map(Number);
const admin = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
await admin.connect();
const daemons: { root: string; services: BenchServices; daemon: DaemonProcess }[] = [];
let sampling = true;
let sampler: Promise<void> = Promise.resolve();
try {
  for (const root of roots) {
    const services = await createServices();
    const daemon = await startDaemon({
      databaseUrl: services.databaseUrl,
      redisUrl: services.redisUrl,
      redisKeyPrefix: services.redisKeyPrefix,
      dataDir: mkdtempSync(join(tmpdir(), 'run-pairs-')),
      openaiUpstream: 'http://127.0.0.1:9',
      root,
      ...(flags['cpu-prof-dir'] && { cpuProfDir: flags['cpu-prof-dir'] }),
    }).catch(async (error) => {
      await services.drop();
      throw error;
    });
    if (stepPairs) await setPricing(daemon);
    daemons.push({ root, services, daemon });
  }
  const databases = daemons.map((d) => d.services.databaseName);

  /** CPU µs so far of the daemon and of its database's backends, and the database's commits. */
  const costs = async (daemon: DaemonProcess, database: string) => {
    const { rows } = await admin.query<{ pids: number[]; commits: string }>(
      `SELECT array(SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend') AS pids,
         (SELECT xact_commit FROM pg_stat_database WHERE datname = $1) AS commits`,
      [database],
    );
    let postgres = 0;
    for (const pid of rows[0]!.pids) postgres += await cpuUs(pid).catch(() => 0);
    return { daemon: await cpuUs(daemon.pid), postgres, commits: Number(rows[0]!.commits) };
  };

  const waits = new Map<string, number>();
  sampler = (async () => {
    while (sampling) {
      const { rows } = await admin.query<{ w: string; n: number }>(
        `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') AS w, count(*)::int AS n FROM pg_stat_activity
         WHERE datname = ANY($1) AND state = 'active' GROUP BY 1`,
        [databases],
      );
      for (const r of rows) waits.set(r.w, (waits.get(r.w) ?? 0) + r.n);
      await new Promise((r) => setTimeout(r, 20));
    }
  })().catch((error: Error) => console.error(`wait sampling stopped: ${error.message}`));

  for (let round = 1; round <= Number(flags.rounds); round++) {
    for (const c of connections) {
      // Alternate which build goes first, so neither always follows the other's load.
      for (const { root, daemon, services } of round % 2 ? daemons : [...daemons].reverse()) {
        const api = pool(daemon.url, c);
        const headers = { authorization: `Bearer ${daemon.apiKey}` };
        const starts: number[] = [];
        const ends: number[] = [];
        // Step pairs: a run per worker, its sequence counted on across the rounds.
        const stepRuns = stepPairs ? await startRuns(api, headers, c, `pairs-${round}`) : [];
        const sequences = stepRuns.map(() => 0);
        const pair = async (worker: number) => {
          const t0 = performance.now();
          if (stepPairs) {
            const runId = stepRuns[worker]!;
            const step = await json<{ id: string }>(
              api,
              'POST',
              `/v1/runs/${runId}/steps`,
              headers,
              {
                type: 'MODEL_CALL',
                sequence: ++sequences[worker]!,
                model: MODEL,
                input_data: { prompt: 'Say hello.' },
              },
              201,
            );
            const t1 = performance.now();
            await json(
              api,
              'PATCH',
              `/v1/runs/${runId}/steps/${step.id}`,
              headers,
              { status: 'COMPLETED', duration_ms: 812, prompt_tokens: 120, completion_tokens: 40 },
              200,
            );
            starts.push(t1 - t0);
            ends.push(performance.now() - t1);
            return;
          }
          const run = await json<{ id: string; status: string }>(
            api,
            'POST',
            '/v1/runs',
            headers,
            { user_id: `bench-user-${worker % 50}` },
            201,
          );
          const t1 = performance.now();
          await json(api, 'POST', `/v1/runs/${run.id}/end`, headers, { status: 'COMPLETED' }, 200);
          starts.push(t1 - t0);
          ends.push(performance.now() - t1);
        };
        await loop(c, 1, pair);
        starts.length = 0;
        ends.length = 0;
        waits.clear();
        // A backend reports its commits within a second of going idle: read once it has. (The
        // pool's backends stay connected under load; one that closed during the loop is missed.)
        const settledCosts = () => sleep(1_200).then(() => costs(daemon, services.databaseName));
        const before = await settledCosts();
        const result = await loop(c, Number(flags.duration), pair);
        const after = await settledCosts();
        const done = result.ops * result.durationS;
        const perPair = (key: 'daemon' | 'postgres' | 'commits') => (after[key] - before[key]) / done;
        await api.close();
        const [s, e] = [summarize(starts), summarize(ends)];
        const top = [...waits]
          .sort((a, b) => b[1] - a[1])
          .slice(0, 4)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ');
        console.log(
          `round ${round}, ${c} connections, ${root}: ${result.ops.toFixed(0)} pairs/s, pair p50 ${result.latency.p50.toFixed(1)} ` +
            `p99 ${result.latency.p99.toFixed(1)} ms; ${first} p50 ${s.p50.toFixed(1)} p99 ${s.p99.toFixed(1)}; ${second} p50 ${e.p50.toFixed(1)} ` +
            `p99 ${e.p99.toFixed(1)}; errors ${result.errors}; a pair: daemon ${perPair('daemon').toFixed(0)} µs, ` +
            `Postgres ${perPair('postgres').toFixed(0)} µs, ${perPair('commits').toFixed(2)} commits; Postgres waits sampled: ${top}`,
        );
      }
    }
  }
} finally {
  // Stopped here, not after the rounds: a round that throws must not leave it querying a closed client.
  sampling = false;
  await sampler;
  for (const { daemon } of daemons) await daemon.stop();
  for (const { services } of daemons) await services.drop();
  await admin.end();
}
