/**
 * What rule 13 costs per decision (issue #51): one daemon on Postgres + Redis, one workspace and
 * one user, with 0 and with 5 applicable deny budgets (the workspace's per day, week and month, the
 * user's per week and month: limits too large to deny) in alternating rounds. A week's and a
 * month's past days are read in the same MGET as the day's spend, so the 5-budget case should stay
 * within 10% of the 0-budget case in calls/s. Cells: an API step's creation and result (a pair),
 * and a proxied chat call into a run against a fake upstream.
 *
 *   npx tsx bench/budgets-ab.ts [--connections 1,16] [--rounds 4] [--duration 8] [--upstream-delay 0]
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createServices } from './lib/database.js';
import { json, loop, pool } from './lib/loops.js';
import { buildDaemon, startDaemon, startHelper } from './lib/processes.js';
import { apiHeaders, MODEL, setPricing } from './lib/scenarios.js';

const { values: flags } = parseArgs({
  options: {
    connections: { type: 'string', default: '1,16' },
    rounds: { type: 'string', default: '4' },
    duration: { type: 'string', default: '8' },
    'upstream-delay': { type: 'string', default: '0' },
    'no-build': { type: 'boolean', default: false },
  },
});
const connections = flags.connections.split(',').map(Number);
const rounds = Number(flags.rounds);
const pieceS = Number(flags.duration) / rounds;
const CASES = [0, 5] as const;
type Cell = 'step pair' | 'proxied call';
const USER = 'bench-user';
const BUDGETS = [
  { scope: 'workspace', period: 'day' },
  { scope: 'workspace', period: 'week' },
  { scope: 'workspace', period: 'month' },
  { scope: 'user', subject: USER, period: 'week' },
  { scope: 'user', subject: USER, period: 'month' },
].map((budget) => ({ ...budget, limit_usd: 1_000_000 }));
const CHAT = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello in five words.' }] });

if (!flags['no-build']) buildDaemon();
const services = await createServices();
const upstream = await startHelper('upstream-server.ts', [flags['upstream-delay'], '0']);
const daemon = await startDaemon({
  databaseUrl: services.databaseUrl,
  redisUrl: services.redisUrl,
  redisKeyPrefix: services.redisKeyPrefix,
  dataDir: mkdtempSync(join(tmpdir(), 'budgets-ab-')),
  openaiUpstream: `${upstream.url}/v1`,
});
const totals = new Map<string, { ops: number; seconds: number; errors: number }>();
const key = (budgets: number, cell: Cell, c: number) => `${budgets}|${cell}|${c}`;
const add = (k: string, result: { ops: number; durationS: number; errors: number }) => {
  const sum = totals.get(k) ?? { ops: 0, seconds: 0, errors: 0 };
  totals.set(k, {
    ops: sum.ops + result.ops * result.durationS,
    seconds: sum.seconds + result.durationS,
    errors: sum.errors + result.errors,
  });
};
try {
  await setPricing(daemon);
  const admin = pool(daemon.url, 1);
  const headers = apiHeaders(daemon);
  let ids: string[] = [];
  const setBudgets = async (count: number) => {
    for (const id of ids) {
      const res = await admin.request({ method: 'DELETE', path: `/v1/budgets/${id}`, headers });
      await res.body.text();
    }
    ids = [];
    for (const budget of BUDGETS.slice(0, count))
      ids.push((await json<{ id: string }>(admin, 'POST', '/v1/budgets', headers, budget, 201)).id);
  };
  for (let round = 1; round <= rounds; round++) {
    // Alternate which case goes first, so neither always follows the other's load.
    for (const budgets of round % 2 ? CASES : [...CASES].reverse()) {
      await setBudgets(budgets);
      for (const c of connections) {
        const api = pool(daemon.url, c);
        const runs = await Promise.all(
          Array.from({ length: c }, async () => {
            const run = await json<{ id: string }>(api, 'POST', '/v1/runs', headers, { user_id: USER }, 201);
            return { id: run.id, sequence: 0 };
          }),
        );
        const stepPair = async (worker: number) => {
          const run = runs[worker]!;
          const step = await json<{ id: string; status: string }>(
            api,
            'POST',
            `/v1/runs/${run.id}/steps`,
            headers,
            { type: 'MODEL_CALL', sequence: ++run.sequence, model: MODEL },
            201,
          );
          if (step.status !== 'ALLOWED') throw new Error(`step ${step.status}`);
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
        add(key(budgets, 'step pair', c), await loop(c, pieceS, stepPair));
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
        add(key(budgets, 'proxied call', c), await loop(c, pieceS, call));
        await Promise.all(
          runs.map((run) => json(api, 'POST', `/v1/runs/${run.id}/end`, headers, { status: 'COMPLETED' }, 200)),
        );
        await api.close();
      }
    }
  }
  await admin.close();

  console.log('| cell | connections | 0 budgets calls/s | 5 budgets calls/s | 5 vs 0 | errors (0, 5) |');
  console.log('|---|---|---|---|---|---|');
  for (const cell of ['step pair', 'proxied call'] as const) {
    for (const c of connections) {
      const [none, five] = CASES.map((budgets) => totals.get(key(budgets, cell, c))!);
      const rate = (total: { ops: number; seconds: number }) => total.ops / total.seconds;
      console.log(
        `| ${cell} | ${c} | ${rate(none!).toFixed(0)} | ${rate(five!).toFixed(0)} | ` +
          `${((rate(five!) / rate(none!) - 1) * 100).toFixed(1)}% | ${none!.errors}, ${five!.errors} |`,
      );
    }
  }
} finally {
  await daemon.stop();
  await upstream.stop();
  await services.drop();
}
