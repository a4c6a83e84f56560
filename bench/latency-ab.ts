/**
 * Added latency of builds side by side: each root's daemon on a stack of its own (database, Redis
 * prefix, fake upstream answering after `--delay` ms), driven in alternating rounds by one
 * proxied-call cell, with the upstream measured direct in the same rounds as the baseline. For a
 * change that moves p50 by a fraction of a millisecond, which one run of the full bench cannot
 * tell from the hour.
 *
 *   npx tsx bench/latency-ab.ts --roots /tmp/base,. [--connections 16] [--delay 20] [--rounds 6] [--duration 5]
 */
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { runCell, type Target } from './lib/load.js';
import { pool } from './lib/loops.js';
import { startProxyStack, type ProxyStack } from './lib/stack.js';
import { apiHeaders, chatTarget, setPricing, startRuns } from './lib/scenarios.js';

const { values: flags } = parseArgs({
  options: {
    roots: { type: 'string', default: '.' },
    connections: { type: 'string', default: '16' },
    delay: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '6' },
    duration: { type: 'string', default: '5' },
  },
});
const roots = flags.roots.split(',').map((root) => resolve(root));
const connections = Number(flags.connections);
const stacks: { root: string; stack: ProxyStack; target: Target; direct: Target }[] = [];
try {
  for (const root of roots) {
    const stack = await startProxyStack({ root }, Number(flags.delay));
    try {
      await setPricing(stack.daemon);
      const api = pool(stack.daemon.url, 1);
      const runId = (await startRuns(api, apiHeaders(stack.daemon), 1, 'latency-ab'))[0]!;
      await api.close();
      const target = chatTarget(stack.daemon, runId);
      // The same request, straight to the upstream: what the round's added latency is read against.
      const direct = { ...target, url: `${stack.upstream.url}/v1/chat/completions` };
      stacks.push({ root, stack, target, direct });
      await runCell(target, connections, 2, 0); // warm-up: JIT, pools, caches
    } catch (error) {
      if (!stacks.some((entry) => entry.stack === stack)) await stack.stop();
      throw error;
    }
  }
  const added = new Map<string, { p50: number[]; p99: number[]; rps: number[] }>();
  for (let round = 1; round <= Number(flags.rounds); round++) {
    for (const { root, target, direct } of round % 2 ? stacks : [...stacks].reverse()) {
      const base = await runCell(direct, connections, Number(flags.duration));
      const cell = await runCell(target, connections, Number(flags.duration));
      const entry = added.get(root) ?? { p50: [], p99: [], rps: [] };
      entry.p50.push(cell.latency.p50 - base.latency.p50);
      entry.p99.push(cell.latency.p99 - base.latency.p99);
      entry.rps.push(cell.rps);
      added.set(root, entry);
      console.log(
        `round ${round} ${root}: ${cell.rps.toFixed(0)}/s, added p50 +${(cell.latency.p50 - base.latency.p50).toFixed(3)} ` +
          `p99 +${(cell.latency.p99 - base.latency.p99).toFixed(3)} ms (direct p50 ${base.latency.p50.toFixed(2)})`,
      );
    }
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  for (const [root, { p50, p99, rps }] of added)
    console.log(
      `${root}: median of rounds, added p50 +${median(p50).toFixed(3)} p99 +${median(p99).toFixed(3)} ms, ${median(rps).toFixed(0)}/s`,
    );
} finally {
  for (const { stack } of stacks) await stack.stop();
}
