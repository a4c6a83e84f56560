/**
 * Proxied calls while someone reads run details: in each cell, 16 connections of chat completions
 * through the daemon (one long run) and, at the same time, one client reading a 1,000-step run
 * detail in a loop. Two builds alternate, each with its own stack (database, upstream, daemon).
 * What a dashboard's reads cost the agents' calls.
 *
 *   npx tsx bench/mixed-load.ts [--roots /tmp/base,.] [--rounds 4] [--reads-per-second 20]
 *
 * `--reads-per-second`: the reader paces itself to that rate instead of reading back to back, so
 * that both builds serve the same reads and the calls' figures compare read for read.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { runCell } from './lib/load.js';
import { json, loop, pool, read } from './lib/loops.js';
import { startProxyStack } from './lib/stack.js';
import { apiHeaders, chatTarget, MODEL, setPricing, startRuns } from './lib/scenarios.js';
import { summarize } from './lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    roots: { type: 'string', default: '/tmp/base,.' },
    rounds: { type: 'string', default: '4' },
    'reads-per-second': { type: 'string' },
  },
});
const readGapMs = flags['reads-per-second'] ? 1000 / Number(flags['reads-per-second']) : 0;

const sides = [];
for (const root of flags.roots.split(',')) {
  const stack = await startProxyStack(root === '.' ? {} : { root });
  await setPricing(stack.daemon);
  const headers = apiHeaders(stack.daemon);
  const api = pool(stack.daemon.url, 8);
  const [proxyRun, detailRun] = await startRuns(api, headers, 2, 'mixed');
  // 1,000 finished steps through the API, eight writers.
  await Promise.all(
    Array.from({ length: 8 }, async (_, w) => {
      for (let n = w + 1; n <= 1_000; n += 8) {
        const step = await json<{ id: string }>(
          api,
          'POST',
          `/v1/runs/${detailRun}/steps`,
          headers,
          { type: 'MODEL_CALL', sequence: n, model: MODEL, input_data: { prompt: `Step ${n}` } },
          201,
        );
        await json(
          api,
          'PATCH',
          `/v1/runs/${detailRun}/steps/${step.id}`,
          headers,
          {
            status: 'COMPLETED',
            duration_ms: 700,
            prompt_tokens: 500,
            completion_tokens: 100,
            output_data: { finish_reason: 'stop' },
          },
          200,
        );
      }
    }),
  );
  await api.close();
  sides.push({
    root,
    stack,
    proxyRun: proxyRun!,
    detailRun: detailRun!,
    cells: [] as { rps: number; p50: number; p99: number }[],
    reads: [] as number[],
  });
}
try {
  for (let r = 0; r < Number(flags.rounds); r++) {
    for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
      const reader = pool(side.stack.daemon.url, 1);
      const started = performance.now();
      const headers = apiHeaders(side.stack.daemon);
      const [cell] = await Promise.all([
        runCell(chatTarget(side.stack.daemon, side.proxyRun), 16, 8, 1),
        loop(1, 9, async (_, i) => {
          // Paced: each read starts on its tick (or at once, when the one before ran past it).
          if (readGapMs > 0) await sleep(Math.max(0, started + i * readGapMs - performance.now()));
          const t0 = performance.now();
          await read(reader, `/v1/runs/${side.detailRun}`, headers, 200);
          side.reads.push(performance.now() - t0);
        }),
      ]);
      side.cells.push({ rps: cell.rps, p50: cell.latency.p50, p99: cell.latency.p99 });
      await reader.close();
    }
  }
  for (const side of sides) {
    const list = (pick: (c: { rps: number; p50: number; p99: number }) => number, digits: number) =>
      side.cells.map((c) => pick(c).toFixed(digits)).join(', ');
    const reads = summarize(side.reads);
    console.log(
      `${side.root}: proxied calls/s ${list((c) => c.rps, 0)}; p50 ${list((c) => c.p50, 2)} ms; p99 ${list((c) => c.p99, 2)} ms | ` +
        `run detail reads ${side.reads.length}, p50 ${reads.p50.toFixed(2)} / p99 ${reads.p99.toFixed(2)} ms`,
    );
  }
} finally {
  for (const side of sides) await side.stack.stop();
}
