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
}

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
        timeout: 30,
      },
      (error, result) => {
        if (error) return reject(error);
        resolve({ durationS: result.duration, errors: result.errors + result.timeouts, non2xx: result.non2xx });
      },
    );
    instance.on('response', (_client: unknown, status: number, _bytes: number, ms: number) => {
      if (status >= 200 && status < 300) onLatency?.(ms);
    });
  });
}

/**
 * A cell in pieces (see `alternate` in loops.ts). Each piece is a new autocannon with connections
 * of its own, so each warms up first: 1 s before the first piece (JIT, pools, caches), 0.25 s
 * before the others, so no piece's samples include opening its connections.
 */
export function pooledCell(target: Target, connections: number, warmupS = 1): Pooled<CellResult> {
  const samples: number[] = [];
  let seconds = 0;
  let errors = 0;
  let non2xx = 0;
  let pieces = 0;
  return {
    async run(durationS) {
      const warm = pieces++ === 0 ? warmupS : Math.min(warmupS, 0.25);
      if (warm > 0) await once(target, connections, warm);
      const piece = await once(target, connections, durationS, (ms) => samples.push(ms));
      seconds += piece.durationS;
      errors += piece.errors;
      non2xx += piece.non2xx;
    },
    result: () => ({ connections, durationS: seconds, rps: samples.length / seconds, latency: summarize(samples), errors, non2xx }),
  };
}

export async function runCell(target: Target, connections: number, durationS: number, warmupS = 1): Promise<CellResult> {
  const cell = pooledCell(target, connections, warmupS);
  await cell.run(durationS);
  return cell.result();
}
