/**
 * The daemon's RSS as `npm run bench` reads it (VmRSS: idle 60 s after start, the peak under the
 * load, idle 60 s after it), for one build or several side by side, without the rest of the bench.
 * Each build gets a stack of its own (database, Redis prefix, fake upstream answering after 0 ms);
 * they idle at the same time, and take the load in alternating pieces: in each round, each build
 * in turn gets chat completions into a run, chat completions with a run per call and SSE streams,
 * at `--connections`. Where the memory is (anonymous and file pages, the V8 heap by space,
 * external) is printed at each reading, and at the moment of each build's peak.
 *
 *   npx tsx bench/rss-profile.ts [--roots /tmp/base,.] [--connections 64] [--rounds 3] [--seconds 3]
 *                                [--idle 60] [--no-build] [--node-flags="..."]
 *
 * The load is lighter than the bench's (no floors or Portkey take turns with the daemon), so read
 * the builds against each other, in the same run.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { pooledCell } from './lib/load.js';
import { pool, pooledStreams, type Pooled } from './lib/loops.js';
import {
  buildDaemon,
  formatBreakdown,
  memoryBreakdown,
  rssMb,
  type DaemonProcess,
  type MemoryBreakdown,
} from './lib/processes.js';
import { apiHeaders, CHAT_STREAM, chatTarget, setPricing, startRuns } from './lib/scenarios.js';
import { startProxyStack, type ProxyStack } from './lib/stack.js';

const { values: flags } = parseArgs({
  options: {
    roots: { type: 'string', default: '.' },
    connections: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '3' },
    idle: { type: 'string', default: '60' },
    'no-build': { type: 'boolean', default: false },
    'node-flags': { type: 'string' },
  },
});
const connections = Number(flags.connections);
const rounds = Number(flags.rounds);
const pieceS = Number(flags.seconds);
const idleS = Number(flags.idle);
const roots = flags.roots.split(',');

interface Build {
  root: string;
  stack: ProxyStack;
  cells: Pooled<unknown>[];
  peakMb: number;
  atPeak?: MemoryBreakdown;
  closers: (() => Promise<void>)[];
}

/** RSS of every build every 5 s for `seconds`; the last reading of each. */
async function idleAll(builds: Build[], seconds: number): Promise<number[][]> {
  const samples: number[][] = builds.map(() => []);
  for (let s = 0; s <= seconds; s += 5) {
    if (s > 0) await sleep(5_000);
    for (const [i, b] of builds.entries()) samples[i]!.push(Math.round(await rssMb(b.stack.daemon.pid)));
  }
  return samples;
}

function streams(daemon: DaemonProcess, runId: string, closers: (() => Promise<void>)[]) {
  const target = chatTarget(daemon, runId, CHAT_STREAM);
  const url = new URL(target.url);
  const dispatcher = new Pool(url.origin, { connections });
  closers.push(() => dispatcher.close());
  return pooledStreams(
    dispatcher,
    () => ({ method: 'POST', path: url.pathname, headers: target.headers!, body: target.body! }),
    connections,
  );
}

if (!flags['no-build']) buildDaemon();
const builds: Build[] = [];
try {
  for (const root of roots) {
    const stack = await startProxyStack(
      {
        ...(root === '.' ? {} : { root }),
        ...(flags['node-flags'] === undefined ? {} : { nodeFlags: flags['node-flags'].split(/\s+/).filter(Boolean) }),
      },
      0,
    );
    const { daemon } = stack;
    await setPricing(daemon);
    const api = pool(daemon.url, 1);
    const runId = (await startRuns(api, apiHeaders(daemon), 1, 'rss-profile'))[0]!;
    await api.close();
    const closers: (() => Promise<void>)[] = [];
    builds.push({
      root,
      stack,
      cells: [
        pooledCell(chatTarget(daemon, runId), connections),
        pooledCell(chatTarget(daemon, null), connections),
        streams(daemon, runId, closers),
      ],
      peakMb: 0,
      closers,
    });
  }
  await sleep(2_000);
  const atStart = await Promise.all(builds.map((b) => rssMb(b.stack.daemon.pid)));
  const idle = await idleAll(builds, idleS);
  const idleBreakdowns = await Promise.all(builds.map((b) => memoryBreakdown(b.stack.daemon)));

  // Every 250 ms, as the bench's sampler; a breakdown is read when a build passes its peak.
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      for (const b of builds) {
        const mb = await rssMb(b.stack.daemon.pid);
        if (mb > b.peakMb) {
          b.peakMb = mb;
          b.atPeak = await memoryBreakdown(b.stack.daemon).catch(() => b.atPeak);
        }
      }
      await sleep(250);
    }
  })();
  for (let r = 0; r < rounds; r++) {
    for (const b of builds) for (const cell of b.cells) await cell.run(pieceS);
  }
  sampling = false;
  await sampler;
  const afterLoad = await idleAll(builds, idleS);
  for (const [i, b] of builds.entries()) {
    const after = await memoryBreakdown(b.stack.daemon);
    console.log(`\n${b.root}:`);
    console.log(
      `  RSS ${atStart[i]!.toFixed(1)} MB 2 s after start; idle ${idle[i]!.at(-1)} MB ` +
        `(every 5 s: ${idle[i]!.join(', ')}); peak under load ${b.peakMb.toFixed(1)} MB; ` +
        `idle after the load ${afterLoad[i]!.at(-1)} MB (every 5 s: ${afterLoad[i]!.join(', ')})`,
    );
    console.log(`  idle:            ${formatBreakdown(idleBreakdowns[i]!)}`);
    if (b.atPeak) console.log(`  at the peak:     ${formatBreakdown(b.atPeak)}`);
    console.log(`  idle after load: ${formatBreakdown(after)}`);
  }
} finally {
  for (const b of builds) {
    for (const close of b.closers) await close();
    await b.stack.stop();
  }
}
