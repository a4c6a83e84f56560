/**
 * Closed-loop workers on undici: C workers each repeat one operation (a request, or a pair of
 * requests) for D seconds; every operation's wall time is one sample. Used where autocannon
 * cannot express the work: pairs whose second request needs the first's answer, and streams
 * whose first and last byte are timed separately.
 */
import { Pool, type Dispatcher } from 'undici';
import { summarize, type LatencySummary } from './stats.js';

export interface LoopResult {
  connections: number;
  durationS: number;
  /** Operations per second. */
  ops: number;
  latency: LatencySummary;
  errors: number;
  firstError?: string;
}

export type Operation = (worker: number, iteration: number) => Promise<void>;

/** `samples` collects every operation's time in ms; pass an array to pool samples over several loops. */
export async function loop(
  connections: number,
  durationS: number,
  operation: Operation,
  samples: number[] = [],
): Promise<LoopResult> {
  const before = samples.length;
  let errors = 0;
  let firstError: string | undefined;
  const started = performance.now();
  const deadline = started + durationS * 1000;
  await Promise.all(
    Array.from({ length: connections }, async (_, worker) => {
      for (let i = 0; performance.now() < deadline; i++) {
        const t0 = performance.now();
        try {
          await operation(worker, i);
          samples.push(performance.now() - t0);
        } catch (error) {
          errors++;
          firstError ??= (error as Error).message;
          if (errors > 1000) throw new Error(`too many errors; first: ${firstError}`);
        }
      }
    }),
  );
  const elapsedS = (performance.now() - started) / 1000;
  const mine = samples.slice(before);
  return {
    connections,
    durationS: elapsedS,
    ops: mine.length / elapsedS,
    latency: summarize(mine),
    errors,
    ...(firstError ? { firstError } : {}),
  };
}

/**
 * One measurement taken in pieces: `run` adds `seconds` of it (after a warm-up, as the kind of
 * measurement needs), `result` summarizes every piece's samples together.
 */
export interface Pooled<R> {
  run(seconds: number): Promise<void>;
  result(): R;
}

/**
 * Measures each cell for `durationS` seconds in all, in `rounds` alternating pieces: round r runs
 * every cell in turn, so a slow spell of the machine lands on every cell alike instead of on
 * whichever one it met. What is compared is then measured at the same moments.
 */
export async function alternate(cells: Pooled<unknown>[], rounds: number, durationS: number): Promise<void> {
  for (let r = 0; r < rounds; r++) {
    for (const cell of cells) await cell.run(durationS / rounds);
  }
}

/** `loop` in pieces, on one set of workers' connections (the dispatcher the operation uses). */
export function pooledLoop(connections: number, operation: Operation, warmupS = 1): Pooled<LoopResult> {
  const samples: number[] = [];
  let seconds = 0;
  let errors = 0;
  let firstError: string | undefined;
  let warm = warmupS <= 0;
  return {
    async run(s) {
      if (!warm) await loop(connections, warmupS, operation);
      warm = true;
      const piece = await loop(connections, s, operation, samples);
      seconds += piece.durationS;
      errors += piece.errors;
      firstError ??= piece.firstError;
    },
    result: () => ({
      connections,
      durationS: seconds,
      ops: samples.length / seconds,
      latency: summarize(samples),
      errors,
      ...(firstError ? { firstError } : {}),
    }),
  };
}

export function pool(origin: string, connections: number): Pool {
  return new Pool(origin, { connections, pipelining: 1 });
}

export class HttpError extends Error {}

/** A JSON request that must answer `expect`; the parsed answer. */
export async function json<T = Record<string, unknown>>(
  dispatcher: Dispatcher,
  method: 'GET' | 'POST' | 'PATCH' | 'PUT',
  path: string,
  headers: Record<string, string>,
  body: unknown,
  expect: number,
): Promise<T> {
  const res = await dispatcher.request({
    method,
    path,
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.body.text();
  if (res.statusCode !== expect) throw new HttpError(`${method} ${path}: ${res.statusCode} ${text.slice(0, 200)}`);
  return (text ? JSON.parse(text) : null) as T;
}

/**
 * A GET that must answer `expect`, timed to its last byte: the body is read whole but not parsed.
 * Parsing a large answer (a 1,000-step run detail is ~800 KB) is the client's work, and would be
 * counted as the daemon's.
 */
export async function read(
  dispatcher: Dispatcher,
  path: string,
  headers: Record<string, string>,
  expect: number,
): Promise<number> {
  const res = await dispatcher.request({ method: 'GET', path, headers });
  let bytes = 0;
  for await (const chunk of res.body) bytes += (chunk as Buffer).length;
  if (res.statusCode !== expect) throw new HttpError(`GET ${path}: ${res.statusCode}`);
  return bytes;
}

export interface StreamTimes {
  ttfb: LatencySummary;
  ttlb: LatencySummary;
  /** Streams read whole. */
  streams: number;
  /** Streams per second. */
  ops: number;
  errors: number;
  firstError?: string;
}

/**
 * C workers streaming, in pieces as `pooledLoop`: time to the first body byte and to the last,
 * from the moment the request is handed to undici.
 */
export function pooledStreams(
  dispatcher: Dispatcher,
  request: () => Dispatcher.RequestOptions,
  connections: number,
): Pooled<StreamTimes> {
  const ttfb: number[] = [];
  const ttlb: number[] = [];
  const stream = async () => {
    const t0 = performance.now();
    const res = await dispatcher.request(request());
    let first = NaN;
    for await (const _chunk of res.body) {
      if (Number.isNaN(first)) first = performance.now() - t0;
    }
    if (res.statusCode !== 200) throw new HttpError(`stream answered ${res.statusCode}`);
    ttfb.push(first);
    ttlb.push(performance.now() - t0);
  };
  const streams = pooledLoop(connections, stream, 0);
  let warm = false;
  return {
    async run(seconds) {
      if (!warm) {
        await loop(connections, 1, stream);
        ttfb.length = 0; // the warm-up's streams are not measured
        ttlb.length = 0;
        warm = true;
      }
      await streams.run(seconds);
    },
    result() {
      const { ops, errors, firstError } = streams.result();
      return {
        ttfb: summarize(ttfb),
        ttlb: summarize(ttlb),
        streams: ttfb.length,
        ops,
        errors,
        ...(firstError ? { firstError } : {}),
      };
    },
  };
}
