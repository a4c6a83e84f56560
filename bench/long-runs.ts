/**
 * The run list and a run detail over long runs: a fresh database holding `--runs` runs of
 * `--steps` steps each (a run per agent session, every call a step), then the list's first page
 * (50 runs, the default) and a page of 10, and one run's detail, each read `--reads` times in a
 * row by one client, timed to the last byte.
 *
 *   npx tsx bench/long-runs.ts [--runs 50] [--steps 20000] [--reads 40] [--no-build] [--models-unkept]
 *
 * `--models-unkept`: the runs keep no models (as runs from before migration 18), so the list
 * reads them from the runs' steps.
 *
 * The bench's history has ~20 steps a run, where summing each listed run's steps costs little:
 * this is the shape where it did (before migration 6, p99 391 ms for the first page here).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { connect, createServices } from './lib/database.js';
import { seedDetailRun, workspaceOf } from './lib/history.js';
import { buildDaemon, startDaemon } from './lib/processes.js';
import { apiHeaders } from './lib/scenarios.js';
import { summarize } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    runs: { type: 'string', default: '50' },
    steps: { type: 'string', default: '20000' },
    reads: { type: 'string', default: '40' },
    'no-build': { type: 'boolean', default: false },
    'models-unkept': { type: 'boolean', default: false },
  },
});
const [runs, steps, reads] = [Number(flags.runs), Number(flags.steps), Number(flags.reads)];
if (!flags['no-build']) buildDaemon();
const services = await createServices();
const dataDir = await mkdtemp(join(tmpdir(), 'runguard-bench-'));
const daemon = await startDaemon({
  databaseUrl: services.databaseUrl,
  redisUrl: services.redisUrl,
  redisKeyPrefix: services.redisKeyPrefix,
  dataDir,
  openaiUpstream: 'http://127.0.0.1:9/v1', // no call goes upstream here
});
try {
  const db = await connect(services.databaseUrl);
  const ws = await workspaceOf(db);
  const t0 = performance.now();
  const ids: string[] = [];
  for (let i = 0; i < runs; i++) ids.push(await seedDetailRun(db, ws, steps));
  if (flags['models-unkept']) await db.query('UPDATE runs SET models = NULL');
  await db.query('VACUUM ANALYZE');
  await db.end();
  console.log(`${runs} runs of ${steps} steps stored in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const api = new Pool(daemon.url, { connections: 1 });
  for (const path of ['/v1/runs', '/v1/runs?per_page=10', `/v1/runs/${ids[0]}`]) {
    const ms: number[] = [];
    for (let i = 0; i < reads + 5; i++) {
      const started = performance.now();
      const res = await api.request({ method: 'GET', path, headers: apiHeaders(daemon) });
      await res.body.dump({ limit: Infinity });
      if (res.statusCode !== 200) throw new Error(`${path} answered ${res.statusCode}`);
      if (i >= 5) ms.push(performance.now() - started); // the first five warm up
    }
    const s = summarize(ms);
    console.log(
      `${path.replace(ids[0]!, '<run>')}: p50 ${s.p50.toFixed(2)} ms, p99 ${s.p99.toFixed(2)} ms (${reads} reads)`,
    );
  }
  await api.close();
} finally {
  await daemon.stop();
  await services.drop();
  await rm(dataDir, { recursive: true, force: true });
}
