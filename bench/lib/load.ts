/**
 * One load cell: autocannon with C connections for D seconds against one URL, at once or in
 * pieces. Latencies are taken from autocannon's per-response event (sub-millisecond floats), not
 * its integer histogram, so added latencies under a millisecond stay visible.
 */
import autocannon from 'autocannon';
import type { Pooled } from './loops.js';
import { summarize, type LatencySummary } from './stats.js';

export interface Target {
  url: string;
  method?: 'GET' | 'POST';
  headers?: Record<string, string>;
  body?: string;
}

export interface CellResult {
  connections: number;
  durationS: number;
  rps: number;
  latency: LatencySummary;
  errors: number;
  non2xx: number;
  /** Each alternating piece on its own (absent before 2026-11-29): a before/after is judged per round. */
  pieces?: PieceResult[];
}

export interface PieceResult {
  rps: number;
  p50: number;
  p99: number;
}

/**
 * One autocannon run. Its first response on each connection is not a sample: autocannon starts a
 * request's clock before the connection is open, so that one includes the TCP connect.
 */
function once(target: Target, connections: number, durationS: number, onLatency?: (ms: number) => void) {
  return new Promise<{ durationS: number; errors: number; non2xx: number }>((resolve, reject) => {
    const instance = autocannon(
      {
        url: target.url,
        method: target.method ?? 'GET',
        headers: target.headers ?? {},
        ...(target.body === undefined ? {} : { body: target.body }),
        connections,
        duration: durationS,
        // autocannon looks at its clock on this tick only: at its default (1 s) a 1.25 s run ran 2 s.
        sampleInt: 50,
        timeout: 30,
      },
      (error, result) => {
        if (error) return reject(error);
        // `errors` counts timeouts too.
        resolve({ durationS: result.duration, errors: result.errors, non2xx: result.non2xx });
      },
    );
    const connected = new WeakSet<object>();
    instance.on('response', (client: object, status: number, _bytes: number, ms: number) => {
      if (!connected.has(client)) return void connected.add(client);
      if (status >= 200 && status < 300) onLatency?.(ms);
    });
  });
}

/**
 * A cell in pieces (see `alternate` in loops.ts). Each piece is a new autocannon with connections
 * of its own. The daemon and the servers warm up before the first piece (1 s: JIT, pools,
 * caches) and briefly before the others (0.25 s), as the other cells have run meanwhile.
 */
export function pooledCell(target: Target, connections: number, warmupS = 1): Pooled<CellResult> {
  const samples: number[] = [];
  let seconds = 0;
  let errors = 0;
  let non2xx = 0;
  const pieces: PieceResult[] = [];
  return {
    async run(durationS) {
      const warm = pieces.length === 0 ? warmupS : Math.min(warmupS, 0.25);
      if (warm > 0) await once(target, connections, warm);
      const first = samples.length;
      const piece = await once(target, connections, durationS, (ms) => samples.push(ms));
      const own = summarize(samples.slice(first));
      pieces.push({ rps: own.count / piece.durationS, p50: own.p50, p99: own.p99 });
      seconds += piece.durationS;
      errors += piece.errors;
      non2xx += piece.non2xx;
    },
    result: () => ({
      connections,
      durationS: seconds,
      rps: samples.length / seconds,
      latency: summarize(samples),
      errors,
      non2xx,
      pieces,
    }),
  };
}

export async function runCell(
  target: Target,
  connections: number,
  durationS: number,
  warmupS = 1,
): Promise<CellResult> {
  const cell = pooledCell(target, connections, warmupS);
  await cell.run(durationS);
  return cell.result();
}
