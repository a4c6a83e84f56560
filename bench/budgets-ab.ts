/**
 * What rule 13 costs per decision (issue #51), alone: 0 against 5 applicable budgets on daemons on
 * Postgres + Redis, in alternating rounds (bench/lib/budgets.ts; `npm run bench` runs the same
 * scenario). With `--roots`, one daemon per built checkout (its own database and Redis prefix),
 * all measured in the same rounds: a before/after comparison. The first root is "this build".
 *
 *   npx tsx bench/budgets-ab.ts [--connections 1,8] [--rounds 6] [--duration 12] [--upstream-delay 0]
 *   npx tsx bench/budgets-ab.ts --roots .,/tmp/base --no-build     # this build against another built checkout
 *
 * `--duration`: seconds per cell in all, in `--rounds` pieces (each after a 0.5 s warm-up).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { budgetsMarkdown, budgetsScenario, type BudgetsSystem } from './lib/budgets.js';
import { createServices, type BenchServices } from './lib/database.js';
import { buildDaemon, ROOT, startDaemon, startHelper, type Child } from './lib/processes.js';
import { setPricing } from './lib/scenarios.js';

const { values: flags } = parseArgs({
  options: {
    connections: { type: 'string', default: '1,8' },
    rounds: { type: 'string', default: '6' },
    duration: { type: 'string', default: '12' },
    'upstream-delay': { type: 'string', default: '0' },
    roots: { type: 'string', default: '.' },
    'no-build': { type: 'boolean', default: false },
    'cpu-prof': { type: 'string' },
  },
});
const connections = flags.connections.split(',').map(Number);
const rounds = Number(flags.rounds);
const pieceS = Number(flags.duration) / rounds;
const roots = flags.roots.split(',').map((root) => resolve(root));

if (!flags['no-build']) buildDaemon();
const stops: (() => Promise<void>)[] = [];
try {
  const upstream: Child = await startHelper('upstream-server.ts', [flags['upstream-delay'], '0']);
  stops.push(() => upstream.stop());
  const systems: BudgetsSystem[] = [];
  for (const [i, root] of roots.entries()) {
    const services: BenchServices = await createServices();
    stops.push(() => services.drop());
    const daemon = await startDaemon({
      databaseUrl: services.databaseUrl,
      redisUrl: services.redisUrl,
      redisKeyPrefix: services.redisKeyPrefix,
      dataDir: mkdtempSync(join(tmpdir(), 'budgets-ab-')),
      openaiUpstream: `${upstream.url}/v1`,
      ...(root === ROOT.replace(/\/$/, '') ? {} : { root }),
      ...(flags['cpu-prof'] && { cpuProfDir: flags['cpu-prof'] }),
    });
    stops.push(() => daemon.stop());
    await setPricing(daemon);
    systems.push({ label: i === 0 ? `this build (${root})` : `build ${root}`, daemon, provider: 'openai' });
  }
  const result = await budgetsScenario({
    systems,
    connections,
    rounds,
    pieceS,
    log: (line) => console.log(line),
  });
  console.log(`\n${budgetsMarkdown(result).join('\n')}`);
} finally {
  for (const stop of stops.reverse()) await stop().catch((error: unknown) => console.error(error));
}
