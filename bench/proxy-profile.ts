/**
 * What one proxied call costs the daemon: starts the fake upstream and the real daemon (as
 * `npm run bench` does), drives only the sidecar route, and reports the daemon's own CPU time per
 * call (user + system, from /proc/<pid>/stat) next to throughput and latency. CPU per call is the
 * steady figure on a shared machine; latency moves with whatever else runs.
 *
 *   npx tsx bench/proxy-profile.ts [--connections 64] [--duration 10] [--route run|auto] [--cpu-prof] [--no-build]
 *                                  [--node-flags="--max-semi-space-size=8 ..."] [--alloc-prof] [--daemon-root <dir>]
 *                                  [--log-level warn|info]
 *
 * `--cpu-prof` writes a V8 profile of the daemon into bench/profiles/ (summarize it with
 * bench/profile-summary.ts). `--node-flags` replaces the V8 flags the daemon is launched with,
 * to weigh a GC setting's CPU against its memory. `--alloc-prof` prints the sites that allocate
 * the most per call, garbage included (what the young generation's collections pay for).
 * `--daemon-root` runs the daemon of another built checkout: alternate it with this one for a
 * before/after comparison that sees the same machine. `--log-level info` runs the daemon at the
 * level users run it (one line per proxied call; the default, `warn`, is what the bench runs).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startAllocationSampling } from './lib/allocations.js';
import { runCell } from './lib/load.js';
import { pool } from './lib/loops.js';
import { buildDaemon, freePort, ROOT, rssMb, rssSampler } from './lib/processes.js';
import { startProxyStack } from './lib/stack.js';
import { apiHeaders, chatTarget, setPricing, startRuns } from './lib/scenarios.js';

const { values: flags } = parseArgs({
  options: {
    connections: { type: 'string', default: '64' },
    duration: { type: 'string', default: '10' },
    route: { type: 'string', default: 'run' },
    'cpu-prof': { type: 'boolean', default: false },
    'no-build': { type: 'boolean', default: false },
    'node-flags': { type: 'string' },
    'alloc-prof': { type: 'boolean', default: false },
    'daemon-root': { type: 'string' },
    'log-level': { type: 'string', default: 'warn' },
  },
});
const connections = Number(flags.connections);
const durationS = Number(flags.duration);
if (flags.route !== 'run' && flags.route !== 'auto') throw new Error('--route takes run or auto');

interface DaemonMetrics {
  /** GC seconds so far by kind (minor, major, incremental, weakcb). */
  gcSeconds: Map<string, number>;
  /** Event loop delay since the scrape before, in ms, by statistic (p50, p99, max). */
  loopDelayMs: Map<string, number>;
}

/**
 * From the daemon's /metrics. prom-client resets its event loop histogram at each scrape, so a
 * scrape's loop delay covers the time since the one before it.
 */
async function daemonMetrics(url: string, apiKey: string): Promise<DaemonMetrics> {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${apiKey}` } })).text();
  const gcSeconds = new Map<string, number>();
  for (const match of text.matchAll(/^nodejs_gc_duration_seconds_sum\{kind="(\w+)"\} (\S+)$/gm))
    gcSeconds.set(match[1]!, Number(match[2]));
  const loopDelayMs = new Map<string, number>();
  for (const match of text.matchAll(/^nodejs_eventloop_lag_(p50|p99|max)_seconds (\S+)$/gm))
    loopDelayMs.set(match[1]!, Number(match[2]) * 1000);
  return { gcSeconds, loopDelayMs };
}

/** Bytes a second the daemon allocates while no call comes (sampled over `seconds`). */
async function idleAllocation(inspectPort: number, seconds: number): Promise<number> {
  const sampling = await startAllocationSampling(inspectPort);
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const sites = await sampling.stop();
  return sites.reduce((sum, s) => sum + s.bytes, 0) / seconds;
}

/** User + system CPU seconds a process has used so far. */
async function cpuSeconds(pid: number): Promise<number> {
  const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  // utime and stime are fields 14 and 15 of stat(5); 12 and 13 past the command name. Ticks of 1/100 s.
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

if (!flags['no-build']) buildDaemon();
const inspectPort = flags['alloc-prof'] ? await freePort() : undefined;
const stack = await startProxyStack({
  ...(flags['node-flags'] === undefined ? {} : { nodeFlags: flags['node-flags'].split(/\s+/).filter(Boolean) }),
  ...(inspectPort ? { inspectPort } : {}),
  ...(flags['daemon-root'] ? { root: flags['daemon-root'] } : {}),
  logLevel: flags['log-level'],
  ...(flags['cpu-prof'] ? { cpuProfDir: join(ROOT, 'bench', 'profiles') } : {}),
});
const { daemon } = stack;
try {
  await setPricing(daemon);
  const api = pool(daemon.url, 1);
  const runId = (await startRuns(api, apiHeaders(daemon), 1, 'proxy-profile'))[0]!;
  await api.close();
  const target = chatTarget(daemon, flags.route === 'run' ? runId : null);
  const idleMb = await rssMb(daemon.pid);
  await runCell(target, connections, 2, 0); // warm-up: JIT, pools, caches
  // What the daemon allocates with no call at all (timers, its own metrics), per second: at the
  // few calls a second a loaded machine lets through, it would read as the calls' own.
  const idleBytesPerS = inspectPort ? await idleAllocation(inspectPort, Math.min(5, durationS)) : 0;
  const gcBefore = (await daemonMetrics(daemon.url, daemon.apiKey)).gcSeconds;
  const before = await cpuSeconds(daemon.pid);
  const sampler = rssSampler(daemon.pid);
  const allocations = inspectPort ? await startAllocationSampling(inspectPort) : null;
  const cell = await runCell(target, connections, durationS, 0);
  const used = (await cpuSeconds(daemon.pid)) - before;
  const { peak } = sampler.stop();
  const { gcSeconds: gcAfter, loopDelayMs } = await daemonMetrics(daemon.url, daemon.apiKey);
  const sites = allocations ? await allocations.stop() : [];
  const calls = cell.rps * cell.durationS;
  console.log(
    `${flags.route} route, ${connections} connections, ${cell.durationS} s: ${cell.rps.toFixed(0)} calls/s, ` +
      `p50 ${cell.latency.p50.toFixed(2)} / p90 ${cell.latency.p90.toFixed(2)} / p99 ${cell.latency.p99.toFixed(2)} ms, ` +
      `errors ${cell.errors}, non-2xx ${cell.non2xx}`,
  );
  console.log(
    `daemon CPU ${used.toFixed(2)} s: ${((used / calls) * 1e6).toFixed(0)} µs per call, ` +
      `${((used / cell.durationS) * 100).toFixed(0)}% of a core; RSS ${idleMb.toFixed(1)} MB idle, peak ${peak.toFixed(1)} MB under load`,
  );
  const gc = [...gcAfter].map(
    ([kind, total]) => `${kind} ${(((total - (gcBefore.get(kind) ?? 0)) / used) * 100).toFixed(1)}%`,
  );
  console.log(`GC, as a share of the daemon's CPU: ${gc.join(', ')}`);
  const delay = ['p50', 'p99', 'max'].map((stat) => `${stat} ${(loopDelayMs.get(stat) ?? NaN).toFixed(2)}`);
  console.log(`event loop delay under the load (ms, sampled every 10 ms): ${delay.join(' / ')}`);
  if (sites.length > 0) {
    const total = sites.reduce((sum, s) => sum + s.bytes, 0);
    const idle = idleBytesPerS * cell.durationS;
    console.log(
      `allocated ~${((total - idle) / calls / 1024).toFixed(1)} KiB per call, the idle daemon's ` +
        `${(idleBytesPerS / 1024).toFixed(0)} KiB/s taken out (${(total / calls / 1024).toFixed(1)} KiB with it); the largest sites:`,
    );
    for (const s of sites.slice(0, Number(process.env.ALLOC_SITES ?? 40)))
      console.log(`${(s.bytes / calls).toFixed(0).padStart(7)} B/call  ${s.site}`);
  }
} finally {
  await stack.stop();
}
