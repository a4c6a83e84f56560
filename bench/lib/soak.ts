/**
 * Issue #49's soak: the proxy driven at half its measured maximum, paced, for N minutes, into one
 * run of its own; per minute the daemon's RSS, the calls' p50 and p99, calls, errors and the
 * daemon's CPU per call; at the end the last window against the reference window
 * (bench/lib/soak-verdict.ts), the errors, and whether every call answered has its step and its
 * result in the database.
 *
 * The load is open-loop: calls are sent on a schedule (rate x elapsed time, looked at every 5 ms),
 * not when the last one returns, so a slow spell of the daemon queues calls (their latency counts
 * from the moment they were due) instead of slowing the load down and hiding itself. Connections
 * are the maximum's (64): a stall does not run out of sockets.
 */
import { loadavg } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { connect } from './database.js';
import { loop } from './loops.js';
import { cpuUs, rssMb, type DaemonProcess } from './processes.js';
import { apiHeaders, chatTarget, startRuns } from './scenarios.js';
import {
  everyCallRecorded,
  flat,
  meanIn,
  soakWindows,
  type FlatVerdict,
  type RecordedCounts,
  type SoakWindows,
} from './soak-verdict.js';
import { round, summarize } from './stats.js';

export interface SoakMinute {
  /** 0-based: minute 0 is the first. */
  minute: number;
  /** Calls answered 2xx whose send was due in this minute. */
  calls: number;
  errors: number;
  p50: number;
  p99: number;
  /** Mean and highest of the 5 s RSS samples in the minute, MB. */
  rssMb: number;
  rssMaxMb: number;
  /** The daemon's CPU time (all threads) in the minute over its calls, µs. */
  cpuUsPerCall: number;
  /** 1-minute load average at the minute's end: the machine's other work. */
  load: number;
}

export interface SoakResult {
  minutes: number;
  scenario: string;
  connections: number;
  /** Calls/s asked for: half the maximum. */
  rate: number;
  maximum: { callsPerSecond: number; source: string };
  /** Calls/s sent on schedule over the whole soak (below `rate` if the generator fell behind). */
  sentRate: number;
  perMinute: SoakMinute[];
  windows: SoakWindows;
  /** Mean RSS in each window. */
  rss: FlatVerdict;
  /** p99 of every call due in each window, pooled. */
  p99: FlatVerdict;
  errors: { count: number; byKind: Record<string, number>; first?: string; pass: boolean };
  recorded: RecordedCounts & { byStatus: Record<string, number>; pass: boolean };
  peakRssMb: number;
  loadavg: { start: number[]; end: number[] };
  pass: boolean;
  /** Mean RSS (MB) of each minute (the shape of results before 2026-11-29 08:00). */
  perMinuteMb: number[];
  /** Calls/s answered over the whole soak. */
  ops: number;
}

export interface SoakOptions {
  daemon: DaemonProcess;
  databaseUrl: string;
  /** The proxy's provider for the upstream to drive (the fastest: the maximum's). */
  provider: string;
  minutes: number;
  connections: number;
  /** The maximum calls/s at `connections`, and where it comes from; measured here when absent. */
  maximum?: { callsPerSecond: number; source: string };
  log: (line: string) => void;
}

/** More calls than this queued in the client means the daemon has stopped keeping up: stop queuing. */
const MAX_QUEUED = 5_000;

/** The proxy's calls/s at `connections` in a closed loop of `seconds`, after a warm-up. */
async function measureMaximum(send: () => Promise<number>, connections: number, seconds: number) {
  const call = async () => {
    const status = await send();
    if (status < 200 || status >= 300) throw new Error(`answered ${status}`);
  };
  await loop(connections, 2, call);
  const result = await loop(connections, seconds, call);
  if (result.errors) throw new Error(`the maximum's measure met ${result.errors} errors; first: ${result.firstError}`);
  return result.ops;
}

/** A proxied chat call into a run of its own: the request, and a function that sends it once. */
async function callsIntoNewRun(api: Pool, daemon: DaemonProcess, provider: string, name: string) {
  const runId = (await startRuns(api, apiHeaders(daemon), 1, name))[0]!;
  const target = chatTarget(daemon, runId, undefined, provider);
  const request = {
    method: 'POST' as const,
    path: new URL(target.url).pathname,
    headers: target.headers,
    body: target.body,
  };
  const send = async () => {
    const res = await api.request(request);
    await res.body.dump();
    return res.statusCode;
  };
  return { runId, request, send };
}

export async function soak(options: SoakOptions): Promise<SoakResult> {
  const { daemon, minutes, connections, log } = options;
  const api = new Pool(daemon.url, { connections, pipelining: 1, headersTimeout: 30_000, bodyTimeout: 30_000 });
  try {
    // The maximum's calls go into a run of their own, and the soak's into another: the soak's run
    // holds its calls' steps and nothing else.
    const maximum = options.maximum ?? {
      callsPerSecond: round(
        await measureMaximum(
          (await callsIntoNewRun(api, daemon, options.provider, 'bench-soak-maximum')).send,
          connections,
          10,
        ),
        1,
      ),
      source: `measured here: ${connections} connections, closed loop, 10 s`,
    };
    const { runId, request } = await callsIntoNewRun(api, daemon, options.provider, 'bench-soak');
    const rate = Math.max(1, Math.round(maximum.callsPerSecond / 2));
    const scenario = `proxied chat calls into one run (${options.provider}), ${rate} calls/s paced over ${connections} connections`;
    log(`soak: ${minutes} min of ${scenario}; maximum ${maximum.callsPerSecond} calls/s (${maximum.source})`);

    const seconds = Math.round(minutes * 60);
    const latencies: number[][] = Array.from({ length: seconds }, () => []);
    const errorsBySecond = new Array<number>(seconds).fill(0);
    const byKind: Record<string, number> = {};
    let firstError: string | undefined;
    let answered = 0;
    let sent = 0;
    let notSent = 0;
    let pending = 0;
    let drained: (() => void) | undefined;
    const fail = (second: number, kind: string, message: string) => {
      errorsBySecond[second]!++;
      byKind[kind] = (byKind[kind] ?? 0) + 1;
      firstError ??= message;
    };

    const loadStart = loadavg();
    const samples: { atS: number; rssMb: number; cpuUs: number; load: number }[] = [];
    const t0 = performance.now();
    const sample = async () =>
      samples.push({
        atS: (performance.now() - t0) / 1000,
        rssMb: await rssMb(daemon.pid),
        cpuUs: await cpuUs(daemon.pid),
        load: loadavg()[0]!,
      });
    await sample();
    const sampler = setInterval(() => void sample().catch(() => {}), 5_000);

    const fire = (second: number) => {
      const due = performance.now();
      pending++;
      api
        .request(request)
        .then(
          async (res) => {
            if (res.statusCode >= 200 && res.statusCode < 300) {
              await res.body.dump();
              latencies[second]!.push(performance.now() - due);
              answered++;
            } else {
              // The first failure's answer is kept whole enough to say what failed.
              const text = firstError === undefined ? await res.body.text() : (await res.body.dump(), '');
              fail(
                second,
                `HTTP ${res.statusCode}`,
                `answered ${res.statusCode} at ${second} s: ${text.slice(0, 300)}`,
              );
            }
          },
          (error: Error & { code?: string }) => fail(second, error.code ?? error.name, error.message),
        )
        .finally(() => {
          if (--pending === 0) drained?.();
        });
    };
    try {
      const endMs = seconds * 1000;
      let logged = 0;
      for (;;) {
        const elapsed = performance.now() - t0;
        if (elapsed >= endMs) break;
        const due = Math.floor((elapsed / 1000) * rate);
        const second = Math.min(seconds - 1, Math.floor(elapsed / 1000));
        while (sent + notSent < due) {
          if (pending >= MAX_QUEUED) {
            notSent++;
            fail(second, 'not sent: daemon behind', `over ${MAX_QUEUED} calls queued in the client`);
          } else {
            sent++;
            fire(second);
          }
        }
        const minute = Math.floor(elapsed / 60_000);
        if (minute > logged) {
          // A progress line; the minute's figures are read at the end, when its calls have all answered.
          logged = minute;
          const from = (minute - 1) * 60;
          const calls = latencies.slice(from, from + 60).reduce((n, list) => n + list.length, 0);
          const rss = samples.at(-1)?.rssMb ?? NaN;
          log(
            `soak: minute ${minute} of ${minutes}: ${calls} calls answered, RSS ${rss.toFixed(1)} MB, ${errorsBySecond.reduce((a, b) => a + b, 0)} errors so far`,
          );
        }
        await sleep(5);
      }
      if (pending > 0) await new Promise<void>((resolve) => (drained = resolve));
    } finally {
      clearInterval(sampler);
    }
    await sample();
    const loadEnd = loadavg();

    const perMinute: SoakMinute[] = [];
    for (let m = 0; m * 60 < seconds; m++) {
      const from = m * 60;
      const to = Math.min(seconds, from + 60);
      const inMinute = latencies.slice(from, to).flat();
      const summary = summarize(inMinute);
      const rssIn = samples.filter((s) => s.atS >= from && s.atS < to);
      const before = samples.filter((s) => s.atS <= from).at(-1) ?? samples[0]!;
      const after = samples.filter((s) => s.atS <= to).at(-1) ?? samples.at(-1)!;
      perMinute.push({
        minute: m,
        calls: inMinute.length,
        errors: errorsBySecond.slice(from, to).reduce((a, b) => a + b, 0),
        p50: round(summary.p50, 2),
        p99: round(summary.p99, 2),
        rssMb: round(rssIn.reduce((a, s) => a + s.rssMb, 0) / rssIn.length, 1),
        rssMaxMb: round(Math.max(...rssIn.map((s) => s.rssMb)), 1),
        cpuUsPerCall: round((after.cpuUs - before.cpuUs) / inMinute.length, 0),
        load: round(after.load, 1),
      });
      const row = perMinute.at(-1)!;
      log(
        `soak: minute ${m + 1}: ${row.calls} calls, ${row.errors} errors, p50 ${row.p50} / p99 ${row.p99} ms, ` +
          `RSS ${row.rssMb} MB (max ${row.rssMaxMb}), ${row.cpuUsPerCall} µs CPU a call, load ${row.load}`,
      );
    }

    const windows = soakWindows(minutes);
    const pooledP99 = ([from, to]: [number, number]) =>
      summarize(latencies.slice(Math.floor(from), Math.ceil(to)).flat()).p99;
    const rss = flat(
      round(
        meanIn(
          samples,
          (s) => s.atS,
          (s) => s.rssMb,
          windows.reference,
        ),
        1,
      ),
      round(
        meanIn(
          samples,
          (s) => s.atS,
          (s) => s.rssMb,
          windows.last,
        ),
        1,
      ),
    );
    const p99 = flat(round(pooledP99(windows.reference), 2), round(pooledP99(windows.last), 2));
    const errorCount = errorsBySecond.reduce((a, b) => a + b, 0);
    const recorded = await recordedCalls(options.databaseUrl, runId, answered, log);
    const result: SoakResult = {
      minutes,
      scenario,
      connections,
      rate,
      maximum,
      sentRate: round(sent / seconds, 1),
      perMinute,
      windows,
      rss: { ...rss, ratio: round(rss.ratio, 3) },
      p99: { ...p99, ratio: round(p99.ratio, 3) },
      errors: { count: errorCount, byKind, ...(firstError ? { first: firstError } : {}), pass: errorCount === 0 },
      recorded,
      peakRssMb: round(Math.max(...samples.map((s) => s.rssMb)), 1),
      loadavg: { start: loadStart, end: loadEnd },
      pass: rss.pass && p99.pass && errorCount === 0 && recorded.pass,
      perMinuteMb: perMinute.map((row) => row.rssMb),
      ops: round(answered / seconds, 1),
    };
    for (const line of soakVerdictLines(result)) log(`soak: ${line}`);
    return result;
  } finally {
    await api.close();
  }
}

/**
 * The soak's run read from the database: its steps, and those whose result was written. A call's
 * result is written after its answer, batched (group commit): wait until every answered call's
 * result is in, or 30 s without progress.
 */
async function recordedCalls(
  databaseUrl: string,
  runId: string,
  answered: number,
  log: (line: string) => void,
): Promise<SoakResult['recorded']> {
  const client = await connect(databaseUrl);
  try {
    let last = -1;
    let still = Date.now();
    for (;;) {
      const { rows } = await client.query<{ status: string; n: string; with_result: string }>(
        `SELECT status, count(*) AS n,
                count(*) FILTER (WHERE finished_at IS NOT NULL AND prompt_tokens IS NOT NULL) AS with_result
           FROM steps WHERE run_id = $1 GROUP BY status`,
        [runId],
      );
      const byStatus = Object.fromEntries(rows.map((row) => [row.status, Number(row.n)]));
      const steps = rows.reduce((n, row) => n + Number(row.n), 0);
      const withResult = rows
        .filter((row) => row.status === 'COMPLETED')
        .reduce((n, row) => n + Number(row.with_result), 0);
      const counts = { answered, steps, withResult };
      if (everyCallRecorded(counts) || Date.now() - still > 30_000)
        return { ...counts, byStatus, pass: everyCallRecorded(counts) };
      if (withResult !== last) {
        last = withResult;
        still = Date.now();
      }
      log(`soak: waiting for results: ${withResult} of ${answered} answered calls`);
      await sleep(1_000);
    }
  } finally {
    await client.end();
  }
}

const pct = (ratio: number) => `${ratio >= 1 ? '+' : ''}${((ratio - 1) * 100).toFixed(1)}%`;
const windowText = ([from, to]: [number, number]) => `${(from / 60).toFixed(1)}-${(to / 60).toFixed(1)} min`;

/** One line per condition of the issue, with its verdict. */
export function soakVerdictLines(r: SoakResult): string[] {
  const v = (pass: boolean) => (pass ? 'pass' : 'FAIL');
  const w = `${windowText(r.windows.last)} against ${windowText(r.windows.reference)}${r.windows.scaled ? ', windows scaled to the soak' : ''}`;
  return [
    `${v(r.rss.pass)}  RSS flat: mean ${r.rss.last} MB against ${r.rss.reference} MB, ${pct(r.rss.ratio)} (${w}; within 10%)`,
    `${v(r.p99.pass)}  p99 flat: ${r.p99.last} ms against ${r.p99.reference} ms, ${pct(r.p99.ratio)} (${w}; within 10%)`,
    `${v(r.errors.pass)}  no error: ${r.errors.count}${
      r.errors.count
        ? ` (${Object.entries(r.errors.byKind)
            .map(([k, n]) => `${k}: ${n}`)
            .join(', ')}; first: ${r.errors.first})`
        : ''
    }`,
    `${v(r.recorded.pass)}  every call recorded: ${r.recorded.answered} answered 2xx, ${r.recorded.steps} steps, ${r.recorded.withResult} with their result (${Object.entries(
      r.recorded.byStatus,
    )
      .map(([k, n]) => `${k} ${n}`)
      .join(', ')})`,
  ];
}
