/**
 * "No cost when OpenTelemetry is off" (issue #52), measured: the proxy's chat path of daemons that
 * differ in one thing each, in alternating rounds on the same upstream.
 *
 * - `off`: this build, no OTEL_* variable (what every user without a collector runs);
 * - `on`: this build, exporting to a loopback OTLP/HTTP collector that takes everything (the
 *   cost of OpenTelemetry when it is wanted: a peer, not the baseline);
 * - `pre-otel` (with `--baseline-root`): a build from before OpenTelemetry landed, the honest
 *   "without it" (no flag check, no SDK in the dependency tree), which also lacks whatever else
 *   landed since; beside it, `off` against `on` tells how much of a difference is OpenTelemetry.
 *
 * Each round runs every arm once, in an order rotated each round, so no arm always follows the
 * same one; the ratios are taken per round (same minute of the machine), then their median and
 * spread reported, with the load average of each round.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg } from 'node:os';
import type { DaemonProcess } from './processes.js';
import { runCell, type Target } from './load.js';
import { round } from './stats.js';

export interface OtelArm {
  name: 'off' | 'on' | 'pre-otel';
  daemon: DaemonProcess;
  target: Target;
}

export interface OtelRound {
  /** One-minute load average when the round started. */
  loadavg1: number;
  /** Per arm: requests/s, p50 and p99 latency (ms). */
  arms: Record<string, { rps: number; p50: number; p99: number; errors: number }>;
}

export interface OtelRatio {
  /** `a / b`: e.g. `off / pre-otel`. */
  pair: string;
  /** Throughput of a over b, per round: median, min, max. */
  rps: { median: number; min: number; max: number };
  /** p50 of a minus p50 of b, per round (ms): median, min, max. */
  p50AddedMs: { median: number; min: number; max: number };
  p99AddedMs: { median: number; min: number; max: number };
}

export interface OtelCell {
  upstreamDelayMs: number;
  connections: number;
  rounds: OtelRound[];
  ratios: OtelRatio[];
}

export interface OtelReport {
  arms: string[];
  cells: OtelCell[];
  /** What the loopback collector received from the `on` daemon: proof that it exported. */
  collector: { traceRequests: number; metricRequests: number; bytes: number };
  loadavg: { start: number[]; end: number[] };
}

/** A loopback OTLP/HTTP collector that answers every export with success and counts what it got. */
export async function startOtlpSink(): Promise<{
  url: string;
  received: OtelReport['collector'];
  close(): Promise<void>;
}> {
  const received = { traceRequests: 0, metricRequests: 0, bytes: 0 };
  const server: Server = createServer((req, res) => {
    req.on('data', (chunk: Buffer) => (received.bytes += chunk.length));
    req.on('end', () => {
      if (req.url?.startsWith('/v1/traces')) received.traceRequests++;
      if (req.url?.startsWith('/v1/metrics')) received.metricRequests++;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
const spread = (values: number[], digits: number) => ({
  median: round(median(values), digits),
  min: round(Math.min(...values), digits),
  max: round(Math.max(...values), digits),
});

/** The pairs a run reports: OpenTelemetry off against the build before it, and on against off. */
function pairsOf(arms: readonly OtelArm[]): [string, string][] {
  const names = new Set(arms.map((arm) => arm.name));
  return (
    [
      ['off', 'pre-otel'],
      ['on', 'off'],
    ] as [string, string][]
  ).filter(([a, b]) => names.has(a as OtelArm['name']) && names.has(b as OtelArm['name']));
}

export async function otelCell(
  arms: readonly OtelArm[],
  cell: { delayMs: number; connections: number },
  rounds: number,
  durationS: number,
  log: (line: string) => void,
): Promise<OtelCell> {
  const measured: OtelRound[] = [];
  for (let r = 0; r < rounds; r++) {
    const order = arms.map((_, i) => arms[(i + r) % arms.length]!);
    const result: OtelRound = { loadavg1: round(loadavg()[0]!, 2), arms: {} };
    for (const arm of order) {
      const piece = await runCell(arm.target, cell.connections, durationS / rounds, r === 0 ? 1 : 0.25);
      result.arms[arm.name] = {
        rps: round(piece.rps, 1),
        p50: round(piece.latency.p50, 3),
        p99: round(piece.latency.p99, 3),
        errors: piece.errors + piece.non2xx,
      };
    }
    measured.push(result);
    log(
      `otel ${cell.delayMs} ms upstream, c=${cell.connections}, round ${r + 1}/${rounds} (load ${result.loadavg1}): ` +
        order
          .map(
            (arm) =>
              `${arm.name} ${result.arms[arm.name]!.rps.toFixed(0)}/s p50 ${result.arms[arm.name]!.p50.toFixed(2)} ms`,
          )
          .join(' | '),
    );
  }
  const ratios = pairsOf(arms).map(([a, b]): OtelRatio => ({
    pair: `${a} / ${b}`,
    rps: spread(
      measured.map((m) => m.arms[a]!.rps / m.arms[b]!.rps),
      3,
    ),
    p50AddedMs: spread(
      measured.map((m) => m.arms[a]!.p50 - m.arms[b]!.p50),
      2,
    ),
    p99AddedMs: spread(
      measured.map((m) => m.arms[a]!.p99 - m.arms[b]!.p99),
      2,
    ),
  }));
  for (const ratio of ratios) {
    log(
      `otel ${cell.delayMs} ms, c=${cell.connections}: ${ratio.pair} req/s x${ratio.rps.median} (rounds ${ratio.rps.min}..${ratio.rps.max}), ` +
        `p50 ${ratio.p50AddedMs.median} ms (${ratio.p50AddedMs.min}..${ratio.p50AddedMs.max}), p99 ${ratio.p99AddedMs.median} ms`,
    );
  }
  return { upstreamDelayMs: cell.delayMs, connections: cell.connections, rounds: measured, ratios };
}

/** The report's markdown section. */
export function otelMarkdown(report: OtelReport): string[] {
  const out = [
    '### OpenTelemetry off: the proxy path against the build before it, and OpenTelemetry on',
    '',
    `Arms: ${report.arms.join(', ')} (each its own daemon and database, same upstream), alternated in rounds (order rotated). ` +
      'Ratios per round, then the median and the range over the rounds; "p50 +" is the arm\'s p50 minus the other\'s, in ms. ' +
      `Load average ${report.loadavg.start.map((x) => x.toFixed(2)).join(' ')} at the start, ${report.loadavg.end.map((x) => x.toFixed(2)).join(' ')} at the end. ` +
      `The collector received ${report.collector.traceRequests} trace and ${report.collector.metricRequests} metric exports (${report.collector.bytes} bytes) from \`on\`.`,
    '',
    '| upstream, conns | pair | req/s ratio (median, range) | p50 + ms (median, range) | p99 + ms (median, range) | load average per round |',
    '|---|---|---|---|---|---|',
  ];
  for (const cell of report.cells) {
    for (const ratio of cell.ratios) {
      out.push(
        `| ${cell.upstreamDelayMs} ms, ${cell.connections} | ${ratio.pair} | ${ratio.rps.median.toFixed(3)} (${ratio.rps.min.toFixed(3)}..${ratio.rps.max.toFixed(3)}) | ` +
          `${ratio.p50AddedMs.median} (${ratio.p50AddedMs.min}..${ratio.p50AddedMs.max}) | ${ratio.p99AddedMs.median} (${ratio.p99AddedMs.min}..${ratio.p99AddedMs.max}) | ` +
          `${cell.rounds.map((m) => m.loadavg1.toFixed(1)).join(', ')} |`,
      );
    }
  }
  out.push('');
  return out;
}
