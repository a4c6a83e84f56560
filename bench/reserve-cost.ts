/**
 * What reserve mode costs per call (issue #34, part 3): one daemon on Postgres + Redis, one
 * workspace with a daily budget too large to deny, its `budget_mode` switched between "spend" and
 * "reserve" in alternating rounds. Two cells per mode and connection count: an API step's creation
 * (`POST /v1/runs/<run>/steps` with max_cost_usd, timed alone; its result follows, untimed, so
 * reservations do not pile up), and a proxied chat call with max_tokens into a run (timed whole,
 * against a fake upstream that answers after a fixed delay).
 *
 *   npx tsx bench/reserve-cost.ts [--connections 1,16] [--rounds 2] [--duration 4] [--upstream-delay 10]
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createServices } from './lib/database.js';
import { json, loop, pool } from './lib/loops.js';
import { buildDaemon, startDaemon, startHelper } from './lib/processes.js';
import { apiHeaders, MODEL, setPricing } from './lib/scenarios.js';
import { summarize } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    connections: { type: 'string', default: '1,16' },
    rounds: { type: 'string', default: '2' },
    duration: { type: 'string', default: '4' },
    'upstream-delay': { type: 'string', default: '10' },
    'no-build': { type: 'boolean', default: false },
  },
});
const connections = flags.connections.split(',').map(Number);
const rounds = Number(flags.rounds);
const pieceS = Number(flags.duration) / rounds;
const MODES = ['spend', 'reserve'] as const;
type Mode = (typeof MODES)[number];
type Cell = 'step create' | 'proxied call';
const CHAT = JSON.stringify({
  model: MODEL,
  max_tokens: 64,
  messages: [{ role: 'user', content: 'Say hello in five words.' }],
});

if (!flags['no-build']) buildDaemon();
const services = await createServices();
const upstream = await startHelper('upstream-server.ts', [flags['upstream-delay'], '0']);
const daemon = await startDaemon({
  databaseUrl: services.databaseUrl,
  redisUrl: services.redisUrl,
  redisKeyPrefix: services.redisKeyPrefix,
  dataDir: mkdtempSync(join(tmpdir(), 'reserve-cost-')),
  openaiUpstream: `${upstream.url}/v1`,
});
const samples = new Map<string, number[]>();
const errors = new Map<string, number>();
const key = (mode: Mode, cell: Cell, c: number) => `${mode}|${cell}|${c}`;
try {
  await setPricing(daemon);
  const admin = pool(daemon.url, 1);
  const headers = apiHeaders(daemon);
  // $1M a day: never reached, but a budget to reserve against.
  await json(admin, 'PATCH', '/v1/workspace', headers, { daily_budget_usd: 1_000_000 }, 200);

  for (let round = 1; round <= rounds; round++) {
    // Alternate which mode goes first, so neither always follows the other's load.
    for (const mode of round % 2 ? MODES : [...MODES].reverse()) {
      await json(admin, 'PATCH', '/v1/workspace', headers, { budget_mode: mode }, 200);
      for (const c of connections) {
        const api = pool(daemon.url, c);
        const runs = await Promise.all(
          Array.from({ length: c }, async (_, worker) => {
            const run = await json<{ id: string }>(api, 'POST', '/v1/runs', headers, { user_id: `u${worker}` }, 201);
            return { id: run.id, sequence: 0 };
          }),
        );
        // The creation alone is timed; the warm-up's are dropped.
        let createTimes: number[] = [];
        const stepPair = async (worker: number) => {
          const run = runs[worker]!;
          const t0 = performance.now();
          const step = await json<{ id: string; status: string }>(
            api,
            'POST',
            `/v1/runs/${run.id}/steps`,
            headers,
            { type: 'MODEL_CALL', sequence: ++run.sequence, model: MODEL, max_cost_usd: 0.001 },
            201,
          );
          createTimes.push(performance.now() - t0);
          await json(
            api,
            'PATCH',
            `/v1/runs/${run.id}/steps/${step.id}`,
            headers,
            { status: 'COMPLETED', prompt_tokens: 20, completion_tokens: 10 },
            200,
          );
        };
        await loop(c, 0.5, stepPair);
        createTimes = [];
        const stepResult = await loop(c, pieceS, stepPair);
        samples.set(key(mode, 'step create', c), [...(samples.get(key(mode, 'step create', c)) ?? []), ...createTimes]);
        errors.set(key(mode, 'step create', c), (errors.get(key(mode, 'step create', c)) ?? 0) + stepResult.errors);

        const callTimes = samples.get(key(mode, 'proxied call', c)) ?? [];
        samples.set(key(mode, 'proxied call', c), callTimes);
        const call = async (worker: number) => {
          const res = await api.request({
            method: 'POST',
            path: `/proxy/runs/${runs[worker]!.id}/openai/chat/completions`,
            headers: {
              'content-type': 'application/json',
              authorization: 'Bearer sk-bench',
              'x-runguard-key': daemon.apiKey,
            },
            body: CHAT,
          });
          await res.body.text();
          if (res.statusCode !== 200) throw new Error(`proxied call answered ${res.statusCode}`);
        };
        await loop(c, 0.5, call);
        const callResult = await loop(c, pieceS, call, callTimes);
        errors.set(key(mode, 'proxied call', c), (errors.get(key(mode, 'proxied call', c)) ?? 0) + callResult.errors);
        await Promise.all(
          runs.map((run) => json(api, 'POST', `/v1/runs/${run.id}/end`, headers, { status: 'COMPLETED' }, 200)),
        );
        await api.close();
      }
    }
  }
  await admin.close();

  console.log(`| cell | connections | spend p50 / p99 ms | reserve p50 / p99 ms | samples (spend, reserve) | errors |`);
  console.log(`|---|---|---|---|---|---|`);
  for (const cell of ['step create', 'proxied call'] as const) {
    for (const c of connections) {
      const [spend, reserve] = MODES.map((mode) => summarize(samples.get(key(mode, cell, c)) ?? []));
      const errs = MODES.map((mode) => errors.get(key(mode, cell, c)) ?? 0).join(' / ');
      const counts = MODES.map((mode) => (samples.get(key(mode, cell, c)) ?? []).length).join(', ');
      console.log(
        `| ${cell} | ${c} | ${spend!.p50.toFixed(2)} / ${spend!.p99.toFixed(2)} | ` +
          `${reserve!.p50.toFixed(2)} / ${reserve!.p99.toFixed(2)} | ${counts} | ${errs} |`,
      );
    }
  }
} finally {
  await daemon.stop();
  await upstream.stop();
  await services.drop();
}
