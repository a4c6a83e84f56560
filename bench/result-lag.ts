/**
 * How long a proxied call's answer is out before its result is durable: the window in which a
 * daemon's crash loses the result (then ended RESULT_LOST at its estimate, docs/budgets.md). Under
 * C connections of run-less proxied chat calls (a run of each call's own, the sidecar's common
 * case), the daemon's own histogram `runguard_proxy_result_lag_seconds` (from the answer's last
 * byte released to the result's commit) is read from `/metrics`, alongside the calls' latency.
 * The goal (issue #34): p99 <= 50 ms at 32 connections.
 *
 *   npx tsx bench/result-lag.ts [--connections 32] [--duration 20] [--roots .] [--per-call-run true]
 *
 * `--roots /tmp/base,.`: the same load against each build in turn (a before/after comparison of
 * the calls' latency; a build without the histogram reports no lag). `--per-call-run false`: the
 * calls go into one run instead (`runguard exec`'s case).
 */
import { parseArgs } from 'node:util';
import { runCell } from './lib/load.js';
import { pool } from './lib/loops.js';
import { apiHeaders, chatTarget, setPricing, startRuns } from './lib/scenarios.js';
import { startProxyStack } from './lib/stack.js';
import { round } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    connections: { type: 'string', default: '32' },
    duration: { type: 'string', default: '20' },
    roots: { type: 'string', default: '.' },
    'per-call-run': { type: 'string', default: 'true' },
  },
});
const connections = Number(flags.connections);
const durationS = Number(flags.duration);
const perCallRun = flags['per-call-run'] !== 'false';

const METRIC = 'runguard_proxy_result_lag_seconds';

/** The histogram's cumulative buckets (upper bound in ms, count), summed over its labels. */
async function lagBuckets(url: string): Promise<[number, number][]> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const counts = new Map<number, number>();
  for (const line of text.split('\n')) {
    const match = new RegExp(`^${METRIC}_bucket\\{.*le="([^"]+)".*\\} (\\d+)`).exec(line);
    if (!match) continue;
    const bound = match[1] === '+Inf' ? Infinity : Number(match[1]) * 1000;
    counts.set(bound, (counts.get(bound) ?? 0) + Number(match[2]));
  }
  return [...counts].sort((a, b) => a[0] - b[0]);
}

/** A percentile from cumulative buckets: interpolated linearly inside its bucket, as Prometheus' histogram_quantile. */
function quantile(buckets: [number, number][], q: number): { ms: number; bucketUpTo: number } | null {
  const total = buckets.at(-1)?.[1] ?? 0;
  if (total === 0) return null;
  const rank = q * total;
  let [lower, below] = [0, 0];
  for (const [bound, count] of buckets) {
    if (count >= rank) {
      if (bound === Infinity) return { ms: lower, bucketUpTo: Infinity };
      return { ms: lower + ((bound - lower) * (rank - below)) / Math.max(1, count - below), bucketUpTo: bound };
    }
    [lower, below] = [bound, count];
  }
  return null;
}

/** Counts of one scrape less another's, bucket by bucket: only what the measured load observed. */
const since = (after: [number, number][], before: [number, number][]) =>
  after.map(([bound, count]) => [bound, count - (before.find(([b]) => b === bound)?.[1] ?? 0)] as [number, number]);

for (const root of flags.roots.split(',')) {
  const stack = await startProxyStack(root === '.' ? {} : { root });
  try {
    await setPricing(stack.daemon);
    const runId = perCallRun
      ? null
      : (await startRuns(pool(stack.daemon.url, 1), apiHeaders(stack.daemon), 1, 'result-lag'))[0]!;
    const target = chatTarget(stack.daemon, runId);
    // A warm-up, not counted: connections opened, statements prepared.
    await runCell(target, connections, 2);
    const before = await lagBuckets(stack.daemon.url);
    const cell = await runCell(target, connections, durationS);
    // The last answers' results are written within a few ms: wait for them before reading.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const lag = since(await lagBuckets(stack.daemon.url), before);
    const results = lag.at(-1)?.[1] ?? 0;
    const p50 = quantile(lag, 0.5);
    const p99 = quantile(lag, 0.99);
    const within50 = lag.find(([bound]) => bound === 50)?.[1];
    console.log(
      JSON.stringify(
        {
          build: root,
          connections,
          durationS,
          runs: perCallRun ? 'a run per call' : 'one run',
          calls: { perSecond: round(cell.rps), p50Ms: cell.latency.p50, p99Ms: cell.latency.p99, errors: cell.errors },
          resultLag:
            results === 0
              ? 'not measured (a build without runguard_proxy_result_lag_seconds)'
              : {
                  results,
                  p50Ms: p50 && round(p50.ms, 1),
                  p99Ms: p99 && round(p99.ms, 1),
                  p99BucketUpToMs: p99?.bucketUpTo,
                  within50MsShare: within50 === undefined ? null : round(within50 / results, 4),
                },
        },
        null,
        2,
      ),
    );
  } finally {
    await stack.stop();
  }
}
