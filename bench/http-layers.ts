/**
 * What the HTTP layers alone cost a call (`bench/http-layers-server.ts`): a bare `node:http`
 * server answering a fixed JSON, and the same server forwarding to the fake upstream (0 ms) with
 * undici's `request`, `stream`, `pipeline` and `dispatch` (its handler in undici 7's form and in
 * its own older form, raw header arrays both ways), and over plain sockets with no HTTP library
 * at all (the `net-` modes: a bound, see http-layers-server.ts). Each mode's server runs with the
 * daemon's V8 flags and is measured as the daemon is in `proxy-profile.ts`: CPU per call from
 * /proc/<pid>/stat, and with `--alloc-prof` the bytes allocated per call (V8's sampling heap
 * profiler, garbage included). Modes alternate within each round, so all see the same machine.
 *
 *   npx tsx bench/http-layers.ts [--connections 64] [--duration 5] [--rounds 2] [--alloc-prof]
 *                                [--modes net-bare,bare,net-forward,request,stream,pipeline,dispatch,dispatch-legacy]
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { startAllocationSampling } from './lib/allocations.js';
import { runCell } from './lib/load.js';
import { DAEMON_NODE_FLAGS, freePort, startHelper } from './lib/processes.js';

const { values: flags } = parseArgs({
  options: {
    connections: { type: 'string', default: '64' },
    duration: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '2' },
    'alloc-prof': { type: 'boolean', default: false },
    modes: { type: 'string', default: 'net-bare,bare,net-forward,request,stream,pipeline,dispatch,dispatch-legacy' },
  },
});
const connections = Number(flags.connections);
const durationS = Number(flags.duration);
const modes = flags.modes.split(',');

/** The bench's chat call, as `chatTarget` sends it to the daemon (the same headers and body). */
const BODY = JSON.stringify({
  model: 'gpt-4o-mini',
  messages: [{ role: 'user', content: 'Say hello in five words.' }],
});
const HEADERS = { 'content-type': 'application/json', authorization: 'Bearer sk-bench-not-a-real-key' };

async function cpuSeconds(pid: number): Promise<number> {
  const fields = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

async function measure(mode: string, upstream: string) {
  const inspectPort = flags['alloc-prof'] ? await freePort() : undefined;
  const server = await startHelper('http-layers-server.ts', [mode, upstream], {}, [
    ...DAEMON_NODE_FLAGS,
    ...(inspectPort ? [`--inspect=127.0.0.1:${inspectPort}`] : []),
  ]);
  try {
    const target = { url: `${server.url}/v1/chat/completions`, method: 'POST' as const, headers: HEADERS, body: BODY };
    await runCell(target, connections, 3, 0); // warm-up: JIT, pools
    const before = await cpuSeconds(server.pid);
    const sampling = inspectPort ? await startAllocationSampling(inspectPort) : null;
    const cell = await runCell(target, connections, durationS, 0);
    const used = (await cpuSeconds(server.pid)) - before;
    const sites = sampling ? await sampling.stop() : [];
    const calls = cell.rps * cell.durationS;
    const bytes = sites.reduce((sum, s) => sum + s.bytes, 0);
    return {
      rps: cell.rps,
      cpuUs: (used / calls) * 1e6,
      kib: sites.length ? bytes / calls / 1024 : NaN,
      errors: cell.errors + cell.non2xx,
      p50: cell.latency.p50,
      p99: cell.latency.p99,
      top: sites.slice(0, 8).map((s) => `${(s.bytes / calls).toFixed(0).padStart(6)} B  ${s.site}`),
    };
  } finally {
    await server.stop();
  }
}

const upstream = await startHelper('upstream-server.ts', ['0', '0']);
try {
  for (let round = 1; round <= Number(flags.rounds); round++) {
    const load = (await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).join(' ');
    console.log(`round ${round} (load average ${load})`);
    for (const mode of modes) {
      const r = await measure(mode, upstream.url);
      console.log(
        `  ${mode.padEnd(16)} ${r.rps.toFixed(0).padStart(6)} calls/s (p50 ${r.p50.toFixed(1)} / p99 ${r.p99.toFixed(1)} ms)  ${r.cpuUs.toFixed(0).padStart(4)} µs CPU/call` +
          `${Number.isNaN(r.kib) ? '' : `  ${r.kib.toFixed(1).padStart(5)} KiB/call`}${r.errors ? `  errors ${r.errors}` : ''}`,
      );
      if (process.env.ALLOC_SITES) for (const line of r.top) console.log(`      ${line}`);
    }
  }
} finally {
  await upstream.stop();
}
