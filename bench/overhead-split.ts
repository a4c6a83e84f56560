/**
 * Where a proxied call's added time goes: per connection count, a call's total time direct to the
 * fake upstream, through the sidecar, and the sidecar's own share as the daemon reports it in
 * `x-runguard-overhead-ms` (arrival to forwarding, and to the upstream's headers, minus the wait
 * on the upstream). Total minus direct minus the daemon's share is the HTTP hop and the time a
 * request waits before the daemon reads it. Direct and sidecar alternate in rounds.
 * `--daemon-root` runs another built checkout's daemon, as in proxy-profile.ts (before/after).
 *
 *   npx tsx bench/overhead-split.ts [--connections 1,16,64] [--rounds 3] [--no-build] [--daemon-root <dir>]
 */
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { loop, pool } from './lib/loops.js';
import { buildDaemon } from './lib/processes.js';
import { startProxyStack } from './lib/stack.js';
import { apiHeaders, chatTarget, setPricing, startRuns } from './lib/scenarios.js';
import { summarize, type LatencySummary } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    connections: { type: 'string', default: '1,16,64' },
    rounds: { type: 'string', default: '3' },
    'no-build': { type: 'boolean', default: false },
    'daemon-root': { type: 'string' },
  },
});
const rounds = Number(flags.rounds);

if (!flags['no-build']) buildDaemon();
const stack = await startProxyStack(flags['daemon-root'] ? { root: flags['daemon-root'] } : {});
const { daemon, upstream } = stack;
const f = (x: LatencySummary) => `p50 ${x.p50.toFixed(2)} / p90 ${x.p90.toFixed(2)} / p99 ${x.p99.toFixed(2)} ms`;
try {
  await setPricing(daemon);
  const api = pool(daemon.url, 1);
  const runId = (await startRuns(api, apiHeaders(daemon), 1, 'overhead-split'))[0]!;
  await api.close();
  const target = chatTarget(daemon, runId);
  const sidecarPath = new URL(target.url).pathname;
  for (const c of flags.connections.split(',').map(Number)) {
    const sidecar = new Pool(daemon.url, { connections: c, pipelining: 1 });
    const direct = new Pool(upstream.url, { connections: c, pipelining: 1 });
    const times = { direct: [] as number[], sidecar: [] as number[], own: [] as number[] };
    const call = async (to: Pool, path: string, headers: Record<string, string>, total: number[], own?: number[]) => {
      const started = performance.now();
      const res = await to.request({ method: 'POST', path, headers, body: target.body! });
      await res.body.dump();
      total.push(performance.now() - started);
      own?.push(Number(res.headers['x-runguard-overhead-ms']));
    };
    const directHeaders = { 'content-type': 'application/json', authorization: 'Bearer sk-bench' };
    for (let r = 0; r < rounds; r++) {
      await loop(c, 3, () => call(direct, '/v1/chat/completions', directHeaders, times.direct));
      await loop(c, 3, () => call(sidecar, sidecarPath, target.headers!, times.sidecar, times.own));
    }
    console.log(
      `${c} connections: direct ${f(summarize(times.direct))}; sidecar ${f(summarize(times.sidecar))}; ` +
        `the daemon's own share ${f(summarize(times.own))}`,
    );
    await sidecar.close();
    await direct.close();
  }
} finally {
  await stack.stop();
}
