/**
 * What reading a 1,000-step run detail costs the daemon: two builds side by side, each daemon on a
 * database of its own holding the same seeded run, read in alternating 5 s cells. Reports the
 * reads' latency (to the last byte, not parsed), the daemon's garbage collections and CPU per read
 * (from its /metrics, before and after each cell), and its RSS at the end.
 *
 *   npx tsx bench/detail-reads.ts [--roots /tmp/base,.] [--connections 1] [--rounds 6]
 *
 * `--roots`: built checkouts to run (`.` is this one); build the other with `npx tsc` first.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { connect, createServices } from './lib/database.js';
import { seedDetailRun, workspaceOf } from './lib/history.js';
import { loop, pool, read } from './lib/loops.js';
import { rssMb, startDaemon } from './lib/processes.js';
import { apiHeaders } from './lib/scenarios.js';
import { summarize } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    roots: { type: 'string', default: '/tmp/base,.' },
    connections: { type: 'string', default: '1' },
    rounds: { type: 'string', default: '6' },
  },
});
const connections = Number(flags.connections);

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

const sides = [];
for (const root of flags.roots.split(',')) {
  const services = await createServices();
  const dataDir = await mkdtemp(join(tmpdir(), 'runguard-bench-'));
  const daemon = await startDaemon({
    databaseUrl: services.databaseUrl,
    redisUrl: services.redisUrl,
    redisKeyPrefix: services.redisKeyPrefix,
    dataDir,
    openaiUpstream: 'http://127.0.0.1:9',
    ...(root === '.' ? {} : { root }),
  });
  const db = await connect(services.databaseUrl);
  const runId = await seedDetailRun(db, await workspaceOf(db), 1_000);
  await db.query('VACUUM ANALYZE');
  await db.end();
  sides.push({
    root,
    services,
    dataDir,
    daemon,
    runId,
    samples: [] as number[],
    used: new Map<string, number>(),
    reads: 0,
  });
}
try {
  for (let r = 0; r < Number(flags.rounds); r++) {
    for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
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
} finally {
  for (const side of sides) {
    await side.daemon.stop();
    await side.services.drop();
    await rm(side.dataDir, { recursive: true, force: true });
  }
}
