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
 *                                [--idle 60] [--no-build] [--node-flags="..."] [--cells chat,auto,sse]
 *
 * `--node-flags` replaces the daemon's V8 flags; with `;` between sets, each set goes to the root
 * in the same place, so two flag sets of one build alternate with `--roots .,. --node-flags="A;B"`.
 * `--cells chat` keeps only the 64-connection chat completions into a run (the proxy-profile
 * load). Each build's CPU per call over its pieces (user + system, /proc/<pid>/stat) is printed
 * beside its peak, so a setting's memory and CPU are read in the same rounds.
 *
 * The load is lighter than the bench's (no floors or Portkey take turns with the daemon), so read
 * the builds against each other, in the same run.
 */
import { readFile } from 'node:fs/promises';
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
    cells: { type: 'string', default: 'chat,auto,sse' },
  },
});
const connections = Number(flags.connections);
const rounds = Number(flags.rounds);
const pieceS = Number(flags.seconds);
const idleS = Number(flags.idle);
const roots = flags.roots.split(',');
const flagSets = flags['node-flags']?.split(';').map((set) => set.split(/\s+/).filter(Boolean));
if (flagSets && flagSets.length > 1 && flagSets.length !== roots.length)
  throw new Error('--node-flags: one set, or one per root');
const cellNames = flags.cells.split(',');
for (const name of cellNames) if (!['chat', 'auto', 'sse'].includes(name)) throw new Error(`--cells: ${name}?`);

interface Build {
  root: string;
  stack: ProxyStack;
  flags?: string[];
  cells: Pooled<unknown>[];
  /** Calls answered and the daemon's CPU seconds over its pieces of load. */
  calls: number;
  cpuS: number;
  /** The peak while this build takes its load, and while it waits for the others' pieces. */
  peakMb: number;
  atPeak?: MemoryBreakdown;
  waitingPeakMb: number;
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

/** User + system CPU seconds a process has used so far. */
async function cpuSeconds(pid: number): Promise<number> {
  const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  // utime and stime are fields 14 and 15 of stat(5); 12 and 13 past the command name. Ticks of 1/100 s.
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** A cell whose calls are counted as they are answered (latency samples or streams). */
function counted<R>(cell: Pooled<R>, answered: (r: R) => number): Pooled<R> & { answered(): number } {
  // Before its first piece a cell has run 0 s, and its rates are NaN.
  return { ...cell, answered: () => answered(cell.result()) || 0 };
}

if (!flags['no-build']) buildDaemon();
const builds: Build[] = [];
try {
  for (const [i, root] of roots.entries()) {
    const nodeFlags = flagSets?.[flagSets.length === 1 ? 0 : i];
    const stack = await startProxyStack(
      {
        ...(root === '.' ? {} : { root }),
        ...(nodeFlags === undefined ? {} : { nodeFlags }),
      },
      0,
    );
    const { daemon } = stack;
    await setPricing(daemon);
    const api = pool(daemon.url, 1);
    const runId = (await startRuns(api, apiHeaders(daemon), 1, 'rss-profile'))[0]!;
    await api.close();
    const closers: (() => Promise<void>)[] = [];
    const all = {
      chat: () => counted(pooledCell(chatTarget(daemon, runId), connections), (r) => r.rps * r.durationS),
      auto: () => counted(pooledCell(chatTarget(daemon, null), connections), (r) => r.rps * r.durationS),
      sse: () => counted(streams(daemon, runId, closers), (r) => r.streams),
    };
    builds.push({
      root,
      ...(nodeFlags ? { flags: nodeFlags } : {}),
      stack,
      cells: cellNames.map((name) => all[name as keyof typeof all]()),
      calls: 0,
      cpuS: 0,
      peakMb: 0,
      waitingPeakMb: 0,
      closers,
    });
  }
  await sleep(2_000);
  const atStart = await Promise.all(builds.map((b) => rssMb(b.stack.daemon.pid)));
  const idle = await idleAll(builds, idleS);
  const idleBreakdowns = await Promise.all(builds.map((b) => memoryBreakdown(b.stack.daemon)));

  // Every 250 ms, as the bench's sampler; a breakdown is read when a build passes its peak.
  // A build waiting for the others may make its idle collection (src/daemon/idle-memory.ts) then:
  // that peak is read apart from the one under its own load.
  let sampling = true;
  let loaded: Build | undefined;
  const sampler = (async () => {
    while (sampling) {
      for (const b of builds) {
        const mb = await rssMb(b.stack.daemon.pid);
        if (b !== loaded) b.waitingPeakMb = Math.max(b.waitingPeakMb, mb);
        else if (mb > b.peakMb) {
          b.peakMb = mb;
          b.atPeak = await memoryBreakdown(b.stack.daemon).catch(() => b.atPeak);
        }
      }
      await sleep(250);
    }
  })();
  for (let r = 0; r < rounds; r++) {
    for (const b of builds) {
      loaded = b;
      for (const cell of b.cells as ReturnType<typeof counted>[]) {
        const [cpuBefore, answeredBefore] = [await cpuSeconds(b.stack.daemon.pid), cell.answered()];
        await cell.run(pieceS);
        // The piece's warm-up is in the CPU and not in the calls: a small overcount, alike for every build.
        b.cpuS += (await cpuSeconds(b.stack.daemon.pid)) - cpuBefore;
        b.calls += cell.answered() - answeredBefore;
      }
    }
  }
  sampling = false;
  await sampler;
  const afterLoad = await idleAll(builds, idleS);
  for (const [i, b] of builds.entries()) {
    const after = await memoryBreakdown(b.stack.daemon);
    console.log(`\n${b.root}${b.flags ? ` (${b.flags.join(' ')})` : ''}:`);
    console.log(
      `  RSS ${atStart[i]!.toFixed(1)} MB 2 s after start; idle ${idle[i]!.at(-1)} MB ` +
        `(every 5 s: ${idle[i]!.join(', ')}); peak under load ${b.peakMb.toFixed(1)} MB ` +
        `(${b.waitingPeakMb.toFixed(1)} while the others took theirs); ` +
        `idle after the load ${afterLoad[i]!.at(-1)} MB (every 5 s: ${afterLoad[i]!.join(', ')})`,
    );
    console.log(
      `  CPU ${((b.cpuS / b.calls) * 1e6).toFixed(0)} µs per call (${b.calls.toFixed(0)} calls, ${b.cpuS.toFixed(2)} s)`,
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
