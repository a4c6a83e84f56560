/**
 * One load cell: autocannon with C connections for D seconds against one URL. Latencies are
 * taken from autocannon's per-response event (sub-millisecond floats), not its integer
 * histogram, so added latencies under a millisecond stay visible.
 */
import autocannon from 'autocannon';
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
  return new Promise<{ durationS: number; ok: number; errors: number; non2xx: number }>((resolve, reject) => {
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
        resolve({ durationS: result.duration, ok: result['2xx'], errors: result.errors + result.timeouts, non2xx: result.non2xx });
      },
    );
    instance.on('response', (_client: unknown, status: number, _bytes: number, ms: number) => {
      if (status >= 200 && status < 300) onLatency?.(ms);
    });
  });
}

export async function runCell(target: Target, connections: number, durationS: number, warmupS = 1): Promise<CellResult> {
  if (warmupS > 0) await once(target, connections, warmupS);
  const samples: number[] = [];
  const result = await once(target, connections, durationS, (ms) => samples.push(ms));
  return {
    connections,
    durationS: result.durationS,
    rps: samples.length / result.durationS,
    latency: summarize(samples),
    errors: result.errors,
    non2xx: result.non2xx,
  };
}
