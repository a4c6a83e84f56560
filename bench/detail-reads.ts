/**
 * What reading a 1,000-step run detail costs the daemon: two builds side by side, each daemon on a
 * database of its own holding the same seeded run, read in alternating 5 s cells. Reports the
 * reads' latency (to the last byte, not parsed), the daemon's garbage collections and CPU per read
 * (from its /metrics, before and after each cell), and its RSS at the end.
 *
 *   npx tsx bench/detail-reads.ts [--roots /tmp/base,.] [--connections 1] [--rounds 6] [--history-runs 50000] [--interleave]
 *                                 [--node-flags="A;B"]
 *
 * `--roots`: built checkouts to run (`.` is this one); build the other with `npx tsc` first.
 * `--history-runs`: seed each database with that many runs of history first (50,000: ~1M steps).
 * `--interleave` (two roots, one connection): the sides' reads take turns, read by read, instead of
 * 5 s cells each; on a machine whose load moves from second to second, the fairer comparison.
 * `--node-flags`: V8 flags instead of the daemon's; with `;` between sets, one set per root, so two
 * flag sets of one build compare with `--roots .,. --node-flags="A;B"`.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { connect, createServices, type BenchServices } from './lib/database.js';
import { seedDetailRun, seedHistory, workspaceOf } from './lib/history.js';
import { loop, pool, read } from './lib/loops.js';
import { rssMb, startDaemon, type DaemonProcess } from './lib/processes.js';
import { apiHeaders } from './lib/scenarios.js';
import { summarize } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    roots: { type: 'string', default: '/tmp/base,.' },
    connections: { type: 'string', default: '1' },
    rounds: { type: 'string', default: '6' },
    'history-runs': { type: 'string', default: '0' },
    interleave: { type: 'boolean', default: false },
    'node-flags': { type: 'string' },
  },
});
const connections = Number(flags.connections);
const roots = flags.roots.split(',');
const flagSets = flags['node-flags']?.split(';').map((set) => set.split(/\s+/).filter(Boolean));
if (flagSets && flagSets.length > 1 && flagSets.length !== roots.length)
  throw new Error('--node-flags: one set, or one per root');

/** GC counts and seconds by kind, and the process's CPU seconds, from the daemon's /metrics. */
async function counters(daemon: { url: string; apiKey: string }): Promise<Map<string, number>> {
  const text = await (
    await fetch(`${daemon.url}/metrics`, { headers: { authorization: `Bearer ${daemon.apiKey}` } })
  ).text();
  const values = new Map<string, number>();
  for (const m of text.matchAll(/^nodejs_gc_duration_seconds_(count|sum)\{kind="(\w+)"\} (\S+)$/gm))
    values.set(`${m[2]} ${m[1]}`, Number(m[3]));
  for (const m of text.matchAll(/^process_cpu_seconds_total (\S+)$/gm)) values.set('cpu', Number(m[1]));
  return values;
}

interface Side {
  root: string;
  services: BenchServices;
  dataDir: string;
  daemon: DaemonProcess;
  runId: string;
  samples: number[];
  /** Each round's own latency, to compare the sides round by round. */
  byRound: { p50: number; p99: number }[];
  used: Map<string, number>;
  reads: number;
}

const sides: Side[] = [];
for (const [index, root] of roots.entries()) {
  const nodeFlags = flagSets?.[flagSets.length === 1 ? 0 : index];
  const services = await createServices();
  const dataDir = await mkdtemp(join(tmpdir(), 'runguard-bench-'));
  const daemon = await startDaemon({
    databaseUrl: services.databaseUrl,
    redisUrl: services.redisUrl,
    redisKeyPrefix: services.redisKeyPrefix,
    dataDir,
    openaiUpstream: 'http://127.0.0.1:9',
    ...(root === '.' ? {} : { root }),
    ...(nodeFlags ? { nodeFlags } : {}),
  });
  const db = await connect(services.databaseUrl);
  const workspaceId = await workspaceOf(db);
  const historyRuns = Number(flags['history-runs']);
  if (historyRuns > 0) await seedHistory(db, workspaceId, { runs: historyRuns, users: 500 });
  const runId = await seedDetailRun(db, workspaceId, 1_000);
  await db.query('VACUUM ANALYZE');
  await db.end();
  sides.push({
    root: nodeFlags && flagSets && flagSets.length > 1 ? `${root} (${nodeFlags.join(' ')})` : root,
    services,
    dataDir,
    daemon,
    runId,
    samples: [],
    byRound: [],
    used: new Map<string, number>(),
    reads: 0,
  });
}
/** Each side's GC and CPU over `measured`, added to what it used before. */
async function accounted(measured: () => Promise<void>): Promise<void> {
  const before = await Promise.all(sides.map((side) => counters(side.daemon)));
  await measured();
  for (const [index, side] of sides.entries())
    for (const [key, value] of await counters(side.daemon))
      side.used.set(key, (side.used.get(key) ?? 0) + value - (before[index]!.get(key) ?? 0));
}

/**
 * One 5 s round with the sides' reads taking turns, one read each in turn (the order flipped
 * every turn): a slow moment of the shared machine lands on both alike.
 */
async function interleavedRound(): Promise<void> {
  const apis = sides.map((side) => pool(side.daemon.url, 1));
  const sampled = sides.map((side) => side.samples.length);
  await accounted(async () => {
    const deadline = performance.now() + 5_000;
    for (let turn = 0; performance.now() < deadline; turn++) {
      for (const index of turn % 2 === 0 ? [0, 1] : [1, 0]) {
        const side = sides[index]!;
        const started = performance.now();
        await read(apis[index]!, `/v1/runs/${side.runId}`, apiHeaders(side.daemon), 200);
        side.samples.push(performance.now() - started);
        side.reads++;
      }
    }
  });
  for (const [index, side] of sides.entries()) {
    const inRound = summarize(side.samples.slice(sampled[index]));
    side.byRound.push({ p50: inRound.p50, p99: inRound.p99 });
  }
  await Promise.all(apis.map((api) => api.close()));
}

try {
  for (let round = 0; round < Number(flags.rounds); round++) {
    if (flags.interleave && sides.length === 2) {
      await interleavedRound();
      continue;
    }
    for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
      const sampled = side.samples.length;
      const api = pool(side.daemon.url, connections);
      const before = await counters(side.daemon);
      const cell = await loop(
        connections,
        5,
        async () => {
          await read(api, `/v1/runs/${side.runId}`, apiHeaders(side.daemon), 200);
        },
        side.samples,
      );
      for (const [key, value] of await counters(side.daemon))
        side.used.set(key, (side.used.get(key) ?? 0) + value - (before.get(key) ?? 0));
      side.reads += Math.round(cell.ops * cell.durationS);
      const inRound = summarize(side.samples.slice(sampled));
      side.byRound.push({ p50: inRound.p50, p99: inRound.p99 });
      await api.close();
    }
  }
  for (const side of sides) {
    const l = summarize(side.samples);
    const gc = (kind: string) =>
      `${side.used.get(`${kind} count`) ?? 0} (${((side.used.get(`${kind} sum`) ?? 0) * 1000).toFixed(0)} ms)`;
    console.log(
      `${side.root}: ${side.reads} reads at ${connections} connections, p50 ${l.p50.toFixed(2)} / p90 ${l.p90.toFixed(2)} / ` +
        `p99 ${l.p99.toFixed(2)} ms; GC major ${gc('major')}, incremental ${gc('incremental')}, minor ${gc('minor')}; ` +
        `CPU ${(((side.used.get('cpu') ?? 0) / side.reads) * 1000).toFixed(2)} ms per read; RSS ${(await rssMb(side.daemon.pid)).toFixed(1)} MB`,
    );
  }
  // Round by round, the second side over the first: a slow spell of the machine lands on both.
  const [first, second] = sides;
  if (first && second) {
    const ratios = first.byRound.map((base, round) => {
      const other = second.byRound[round]!;
      return `x${(other.p50 / base.p50).toFixed(2)} / x${(other.p99 / base.p99).toFixed(2)}`;
    });
    console.log(`${second.root} over ${first.root} by round, p50 / p99: ${ratios.join(', ')}`);
  }
} finally {
  for (const side of sides) {
    await side.daemon.stop();
    await side.services.drop();
    await rm(side.dataDir, { recursive: true, force: true });
  }
}
