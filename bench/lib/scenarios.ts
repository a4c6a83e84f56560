/**
 * The measured scenarios: proxy (direct / floors / sidecar / Portkey's gateway), SSE streams, and
 * the run API.
 */
import { Pool } from 'undici';
import { pooledCell, type CellResult, type Target } from './load.js';
import { alternate, json, pool, pooledLoop, pooledStreams, type LoopResult, type StreamTimes } from './loops.js';
import type { DaemonProcess } from './processes.js';
import { round } from './stats.js';

export const MODEL = 'gpt-4o-mini';
const CHAT = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello in five words.' }] });
export const CHAT_STREAM = JSON.stringify({
  model: MODEL,
  messages: [{ role: 'user', content: 'Say hello in five words.' }],
  stream: true,
  stream_options: { include_usage: true },
});
/** The provider credential a real SDK would send; the sidecar forwards it untouched. */
const PROVIDER_AUTH = 'Bearer sk-bench-not-a-real-key';

/** One fake upstream (one fixed delay) and the floors that forward to it. */
export interface UpstreamEndpoints {
  /** The upstream's delay before each answer. */
  delayMs: number;
  /** Fake upstream origin. */
  upstream: string;
  /** Bare pass-through proxy origin: Fastify + undici (`floor-proxy.ts`). */
  floor: string;
  /** The barest one: `node:http` + undici (`floor-http-proxy.ts`). */
  httpFloor: string;
  /** The Fastify floor with the waits a call recorded before it is forwarded has (`floor-proxy.ts --io`). */
  ioFloor: string;
  /** The daemon's provider (an `openai` type) whose upstream this is. */
  provider: string;
}

export interface Endpoints {
  /** One per upstream delay measured; the first also serves the run API's baseline. */
  upstreams: UpstreamEndpoints[];
  /** Portkey's gateway origin: one for every upstream, routed by request headers. */
  portkey: string;
  daemon: DaemonProcess;
  /** A RUNNING run for the run-scoped proxy URL. */
  runId: string;
  /** Another build's daemon and its run (`--baseline-root`), measured as one more system. */
  baseline?: { daemon: DaemonProcess; runId: string };
}

/** A proxy cell: an upstream delay and a connection count. */
export interface ProxyCell {
  delayMs: number;
  connections: number;
}

const upstreamFor = (e: Endpoints, delayMs: number): UpstreamEndpoints => {
  const found = e.upstreams.find((u) => u.delayMs === delayMs);
  if (!found) throw new Error(`no upstream with a ${delayMs} ms delay was started`);
  return found;
};

export interface ProxyProbe {
  available: boolean;
  note: string;
}

const sidecarHeaders = (daemon: DaemonProcess) => ({
  'content-type': 'application/json',
  authorization: PROVIDER_AUTH,
  'x-runguard-key': daemon.apiKey,
  'x-runguard-user-id': 'bench-proxy-user',
});

/** Whether this build of the daemon has the proxy route, asked the way a client would. */
export async function probeProxy(daemon: DaemonProcess): Promise<ProxyProbe> {
  const res = await fetch(`${daemon.url}/proxy/openai/chat/completions`, {
    method: 'POST',
    headers: sidecarHeaders(daemon),
    body: CHAT,
  });
  const text = await res.text();
  if (res.status === 200 && text.includes('"choices"'))
    return { available: true, note: 'proxy route answered like OpenAI' };
  if (res.status === 404) {
    return {
      available: false,
      note: 'PROXY ROUTE NOT IN THIS BUILD: /proxy/openai/... answered 404; proxy and SSE sidecar cells were not measured (merge main once the proxy lands and run again)',
    };
  }
  return {
    available: false,
    note: `PROXY ROUTE BROKEN: /proxy/openai/... answered ${res.status} ${text.slice(0, 200)}`,
  };
}

const PROVIDER_HEADERS = { 'content-type': 'application/json', authorization: PROVIDER_AUTH };

/**
 * A chat completion through the daemon's proxy: into a run (`/proxy/runs/<run>/...`, a step per
 * call, the `runguard exec` case) or, with `runId` null, in a run of its own per call.
 */
export function chatTarget(daemon: DaemonProcess, runId: string | null, body = CHAT, provider = 'openai'): Target {
  return runId === null
    ? { url: `${daemon.url}/proxy/${provider}/chat/completions`, method: 'POST', headers: sidecarHeaders(daemon), body }
    : {
        url: `${daemon.url}/proxy/runs/${runId}/${provider}/chat/completions`,
        method: 'POST',
        headers: { ...PROVIDER_HEADERS, 'x-runguard-key': daemon.apiKey },
        body,
      };
}

/**
 * The same request to each system. Portkey's gateway is told the provider and its host per
 * request, as its users route a self-hosted OpenAI-compatible upstream.
 */
function targets(
  e: Endpoints,
  delayMs: number,
  body: string,
): Record<'direct' | 'floor' | 'httpFloor' | 'ioFloor' | 'sidecar' | 'sidecarPerCallRun' | 'portkey', Target> & {
  sidecarBaseline?: Target;
} {
  const u = upstreamFor(e, delayMs);
  const chat = (origin: string, headers: Record<string, string> = PROVIDER_HEADERS): Target => ({
    url: `${origin}/v1/chat/completions`,
    method: 'POST',
    headers,
    body,
  });
  return {
    direct: chat(u.upstream),
    floor: chat(u.floor),
    httpFloor: chat(u.httpFloor),
    ioFloor: chat(u.ioFloor),
    sidecar: chatTarget(e.daemon, e.runId, body, u.provider),
    sidecarPerCallRun: chatTarget(e.daemon, null, body, u.provider),
    portkey: chat(e.portkey, {
      ...PROVIDER_HEADERS,
      'x-portkey-provider': 'openai',
      'x-portkey-custom-host': `${u.upstream}/v1`,
    }),
    ...(e.baseline ? { sidecarBaseline: chatTarget(e.baseline.daemon, e.baseline.runId, body, u.provider) } : {}),
  };
}

export interface Added {
  p50: number;
  p99: number;
}

/** A log line's added milliseconds, with their sign. */
const signed = (ms: number) => `${ms >= 0 ? '+' : ''}${ms}`;

const added = (
  cell: { latency: { p50: number; p99: number } },
  base: { latency: { p50: number; p99: number } },
): Added => ({
  p50: round(cell.latency.p50 - base.latency.p50, 3),
  p99: round(cell.latency.p99 - base.latency.p99, 3),
});

/** What the proxy and SSE scenarios measure: the same cells through the same endpoints. */
export interface ProxyScenarioOptions {
  endpoints: Endpoints;
  /** Whether the sidecar (and the baseline build's, where there is one) is among the endpoints. */
  withSidecar: boolean;
  proxyCells: ProxyCell[];
  durationS: number;
  rounds: number;
  log: (line: string) => void;
}

export interface ProxyRow {
  /** Absent from results written before 2026-11-26 (the delay was then the run's one option). */
  upstreamDelayMs?: number;
  connections: number;
  direct: CellResult;
  floor: CellResult;
  httpFloor?: CellResult;
  ioFloor: CellResult;
  portkey?: CellResult;
  sidecar?: CellResult;
  sidecarPerCallRun?: CellResult;
  /** The `--baseline-root` build's sidecar, into a run. */
  sidecarBaseline?: CellResult;
  sidecarBaselineAdded?: Added;
  /** This build against the baseline build round by round: calls/s ratio, p50 and p99 differences (ms). */
  sidecarVsBaselineByRound?: { rps: number[]; p50: number[]; p99: number[] };
  floorAdded: Added;
  httpFloorAdded?: Added;
  ioFloorAdded: Added;
  portkeyAdded?: Added;
  sidecarAdded?: Added;
  sidecarPerCallRunAdded?: Added;
  /** Sidecar throughput over floor throughput. */
  sidecarVsFloorRps?: number;
  floorVsDirectRps: number;
  portkeyVsFloorRps?: number;
}

export async function proxyScenario(options: ProxyScenarioOptions): Promise<ProxyRow[]> {
  const { endpoints: e, withSidecar, proxyCells, durationS, rounds, log } = options;
  const rows: ProxyRow[] = [];
  for (const { delayMs, connections: c } of proxyCells) {
    const t = targets(e, delayMs, CHAT);
    // Alternated in rounds within one cell per connection count, so all of them see the same machine noise.
    const cells = {
      direct: pooledCell(t.direct, c),
      httpFloor: pooledCell(t.httpFloor, c),
      floor: pooledCell(t.floor, c),
      ioFloor: pooledCell(t.ioFloor, c),
      portkey: pooledCell(t.portkey, c),
      ...(withSidecar ? { sidecar: pooledCell(t.sidecar, c), perCall: pooledCell(t.sidecarPerCallRun, c) } : {}),
      ...(withSidecar && t.sidecarBaseline ? { baseline: pooledCell(t.sidecarBaseline, c) } : {}),
    };
    await alternate(Object.values(cells), rounds, durationS);
    const [direct, floor, httpFloor, ioFloor, portkey] = [
      cells.direct.result(),
      cells.floor.result(),
      cells.httpFloor.result(),
      cells.ioFloor.result(),
      cells.portkey.result(),
    ];
    const sidecar = cells.sidecar?.result();
    const perCall = cells.perCall?.result();
    const baseline = cells.baseline?.result();
    const row: ProxyRow = {
      upstreamDelayMs: delayMs,
      connections: c,
      direct,
      floor,
      floorAdded: added(floor, direct),
      httpFloor,
      httpFloorAdded: added(httpFloor, direct),
      ioFloor,
      ioFloorAdded: added(ioFloor, direct),
      portkey,
      portkeyAdded: added(portkey, direct),
      floorVsDirectRps: round(floor.rps / direct.rps, 3),
      portkeyVsFloorRps: round(portkey.rps / floor.rps, 3),
      ...(sidecar && perCall
        ? {
            sidecar,
            sidecarPerCallRun: perCall,
            sidecarAdded: added(sidecar, direct),
            sidecarPerCallRunAdded: added(perCall, direct),
            sidecarVsFloorRps: round(sidecar.rps / floor.rps, 3),
          }
        : {}),
      ...(baseline
        ? {
            sidecarBaseline: baseline,
            sidecarBaselineAdded: added(baseline, direct),
            ...(sidecar ? { sidecarVsBaselineByRound: byRound(sidecar, baseline) } : {}),
          }
        : {}),
    };
    rows.push(row);
    const part = (name: string, cell: CellResult, add: Added) =>
      `${name} ${cell.rps.toFixed(0)}/s ${signed(add.p50)}/${signed(add.p99)} ms`;
    log(
      `proxy ${delayMs} ms upstream, c=${c}: direct ${direct.rps.toFixed(0)}/s p50 ${direct.latency.p50.toFixed(2)} p99 ${direct.latency.p99.toFixed(2)} ms | ` +
        [
          part('node:http floor', httpFloor, row.httpFloorAdded!),
          part('floor', floor, row.floorAdded),
          part('I/O floor', ioFloor, row.ioFloorAdded),
          part('Portkey', portkey, row.portkeyAdded!),
          ...(sidecar && perCall
            ? [
                `${part('sidecar', sidecar, row.sidecarAdded!)} (${row.sidecarVsFloorRps} of floor)`,
                part('per-call run', perCall, row.sidecarPerCallRunAdded!),
              ]
            : []),
          ...(baseline ? [part('baseline build', baseline, row.sidecarBaselineAdded!)] : []),
        ].join(' | ') +
        ([direct, floor, httpFloor, ioFloor, portkey, sidecar, perCall].some((x) => x && (x.errors || x.non2xx))
          ? ' (ERRORS: see JSON)'
          : ''),
    );
    const paired = row.sidecarVsBaselineByRound;
    if (paired) {
      const list = (xs: number[], f: (x: number) => string) => xs.map(f).join(' ');
      log(
        `  this build / baseline build by round: calls/s x ${list(paired.rps, (x) => x.toFixed(3))}; ` +
          `p50 ${list(paired.p50, signed)} ms; p99 ${list(paired.p99, signed)} ms`,
      );
    }
  }
  return rows;
}

/** Round r of one cell against round r of another: the same minute of the machine for both. */
function byRound(cell: CellResult, base: CellResult): { rps: number[]; p50: number[]; p99: number[] } {
  const theirs = base.pieces ?? [];
  const pairs = (cell.pieces ?? []).flatMap((mine, r) => (theirs[r] ? [[mine, theirs[r]] as const] : []));
  return {
    rps: pairs.map(([a, b]) => round(a.rps / b.rps, 3)),
    p50: pairs.map(([a, b]) => round(a.p50 - b.p50, 3)),
    p99: pairs.map(([a, b]) => round(a.p99 - b.p99, 3)),
  };
}

export interface StreamAdded {
  ttfb: Added;
  ttlb: Added;
}

export interface SseRow {
  /** Absent from results written before 2026-11-26. */
  upstreamDelayMs?: number;
  connections: number;
  direct: StreamTimes;
  floor: StreamTimes;
  httpFloor?: StreamTimes;
  ioFloor: StreamTimes;
  portkey?: StreamTimes;
  sidecar?: StreamTimes;
  /** The `--baseline-root` build's sidecar. */
  sidecarBaseline?: StreamTimes;
  sidecarBaselineAdded?: StreamAdded;
  floorAdded: StreamAdded;
  httpFloorAdded?: StreamAdded;
  ioFloorAdded: StreamAdded;
  portkeyAdded?: StreamAdded;
  sidecarAdded?: StreamAdded;
}

export async function sseScenario(options: ProxyScenarioOptions): Promise<SseRow[]> {
  const { endpoints: e, withSidecar, proxyCells, durationS, rounds, log } = options;
  const rows: SseRow[] = [];
  const addedTimes = (x: StreamTimes, base: StreamTimes): StreamAdded => ({
    ttfb: added({ latency: x.ttfb }, { latency: base.ttfb }),
    ttlb: added({ latency: x.ttlb }, { latency: base.ttlb }),
  });
  for (const { delayMs, connections: c } of proxyCells) {
    const t = targets(e, delayMs, CHAT_STREAM);
    const dispatchers: Pool[] = [];
    const streams = (target: Target) => {
      const url = new URL(target.url);
      const dispatcher = new Pool(url.origin, { connections: c });
      dispatchers.push(dispatcher);
      return pooledStreams(
        dispatcher,
        () => ({ method: 'POST', path: url.pathname, headers: target.headers!, body: target.body! }),
        c,
      );
    };
    let measured: Record<'direct' | 'floor' | 'httpFloor' | 'ioFloor' | 'portkey', StreamTimes>;
    let sidecar: StreamTimes | undefined;
    let baseline: StreamTimes | undefined;
    try {
      const cells = {
        direct: streams(t.direct),
        httpFloor: streams(t.httpFloor),
        floor: streams(t.floor),
        ioFloor: streams(t.ioFloor),
        portkey: streams(t.portkey),
        ...(withSidecar ? { sidecar: streams(t.sidecar) } : {}),
        ...(withSidecar && t.sidecarBaseline ? { baseline: streams(t.sidecarBaseline) } : {}),
      };
      await alternate(Object.values(cells), rounds, durationS);
      measured = {
        direct: cells.direct.result(),
        floor: cells.floor.result(),
        httpFloor: cells.httpFloor.result(),
        ioFloor: cells.ioFloor.result(),
        portkey: cells.portkey.result(),
      };
      sidecar = cells.sidecar?.result();
      baseline = cells.baseline?.result();
    } finally {
      await Promise.all(dispatchers.map((d) => d.close()));
    }
    const { direct, floor, httpFloor, ioFloor, portkey } = measured;
    const row: SseRow = {
      upstreamDelayMs: delayMs,
      connections: c,
      direct,
      floor,
      floorAdded: addedTimes(floor, direct),
      httpFloor,
      httpFloorAdded: addedTimes(httpFloor, direct),
      ioFloor,
      ioFloorAdded: addedTimes(ioFloor, direct),
      portkey,
      portkeyAdded: addedTimes(portkey, direct),
      ...(sidecar ? { sidecar, sidecarAdded: addedTimes(sidecar, direct) } : {}),
      ...(baseline ? { sidecarBaseline: baseline, sidecarBaselineAdded: addedTimes(baseline, direct) } : {}),
    };
    rows.push(row);
    const part = (name: string, add: StreamAdded) => `${name} ttfb ${signed(add.ttfb.p50)}/${signed(add.ttfb.p99)} ms`;
    const all = [direct, floor, httpFloor, ioFloor, portkey, sidecar];
    log(
      `sse ${delayMs} ms upstream, c=${c}: direct ttfb p50 ${direct.ttfb.p50.toFixed(2)} p99 ${direct.ttfb.p99.toFixed(2)} ms | ` +
        [
          part('node:http floor', row.httpFloorAdded!),
          part('floor', row.floorAdded),
          part('I/O floor', row.ioFloorAdded),
          part('Portkey', row.portkeyAdded!),
          ...(sidecar
            ? [
                `${part('sidecar', row.sidecarAdded!)}, ttlb ${signed(row.sidecarAdded!.ttlb.p50)}/${signed(row.sidecarAdded!.ttlb.p99)} ms`,
              ]
            : []),
          ...(baseline ? [part('baseline build', row.sidecarBaselineAdded!)] : []),
        ].join(' | ') +
        (all.some((x) => x?.errors) ? ` (ERRORS: ${all.find((x) => x?.errors)?.firstError})` : ''),
    );
  }
  return rows;
}

export interface ApiRow {
  connections: number;
  /** Two no-op round trips to a plain node:http server: what a pair costs with no work in it. */
  baseline: LoopResult;
  runPairs: LoopResult;
  stepPairs: LoopResult;
  runPairsVsBaseline: number;
  stepPairsVsBaseline: number;
}

export function apiHeaders(daemon: DaemonProcess): Record<string, string> {
  return { authorization: `Bearer ${daemon.apiKey}` };
}

/** Prices the bench model, so finished steps cost money and move the spend counters. */
export async function setPricing(daemon: DaemonProcess): Promise<void> {
  const api = pool(daemon.url, 1);
  try {
    await json(
      api,
      'PUT',
      `/v1/model-pricing/${MODEL}`,
      apiHeaders(daemon),
      { input_cost_per_token: 0.00000015, output_cost_per_token: 0.0000006 },
      200,
    );
  } finally {
    await api.close();
  }
}

/** Runs whose steps a step loop writes: one per worker. */
export async function startRuns(
  api: Pool,
  headers: Record<string, string>,
  n: number,
  prefix: string,
): Promise<string[]> {
  return Promise.all(
    Array.from(
      { length: n },
      async (_, i) =>
        (await json<{ id: string }>(api, 'POST', '/v1/runs', headers, { user_id: `${prefix}-${i}` }, 201)).id,
    ),
  );
}

export function stepPairLoop(api: Pool, headers: Record<string, string>, runIds: string[], sequenceBase: number[]) {
  return async (w: number) => {
    const runId = runIds[w]!;
    const sequence = ++sequenceBase[w]!;
    const step = await json<{ id: string }>(
      api,
      'POST',
      `/v1/runs/${runId}/steps`,
      headers,
      { type: 'MODEL_CALL', sequence, model: MODEL, input_data: { prompt: 'Say hello in five words.' } },
      201,
    );
    await json(
      api,
      'PATCH',
      `/v1/runs/${runId}/steps/${step.id}`,
      headers,
      { status: 'COMPLETED', duration_ms: 812, prompt_tokens: 120, completion_tokens: 40 },
      200,
    );
  };
}

export async function apiScenario(
  e: Endpoints,
  connections: number[],
  durationS: number,
  rounds: number,
  log: (line: string) => void,
): Promise<ApiRow[]> {
  const headers = apiHeaders(e.daemon);
  const rows: ApiRow[] = [];
  for (const c of connections) {
    const api = pool(e.daemon.url, c);
    const upstream = pool(e.upstreams[0]!.upstream, c);
    try {
      const noop = { 'x-fake-delay-ms': '0' };
      const baselineOp = async () => {
        await json(upstream, 'POST', '/v1/embeddings', noop, { model: 'bench', input: 'a' }, 200);
        await json(upstream, 'POST', '/v1/embeddings', noop, { model: 'bench', input: 'a' }, 200);
      };
      const runOp = async (w: number) => {
        const run = await json<{ id: string; status: string }>(
          api,
          'POST',
          '/v1/runs',
          headers,
          { user_id: `bench-user-${w % 50}` },
          201,
        );
        if (run.status !== 'RUNNING') throw new Error(`run start answered ${run.status}`);
        await json(api, 'POST', `/v1/runs/${run.id}/end`, headers, { status: 'COMPLETED' }, 200);
      };
      const runIds = await startRuns(api, headers, c, `bench-steps-${c}`);
      const sequences = runIds.map(() => 0);
      const stepOp = stepPairLoop(api, headers, runIds, sequences);
      const cells = {
        baseline: pooledLoop(c, baselineOp),
        runPairs: pooledLoop(c, runOp),
        stepPairs: pooledLoop(c, stepOp),
      };
      await alternate(Object.values(cells), rounds, durationS);
      const [baseline, runPairs, stepPairs] = [
        cells.baseline.result(),
        cells.runPairs.result(),
        cells.stepPairs.result(),
      ];
      await Promise.all(
        runIds.map((id) => json(api, 'POST', `/v1/runs/${id}/end`, headers, { status: 'COMPLETED' }, 200)),
      );
      const row: ApiRow = {
        connections: c,
        baseline,
        runPairs,
        stepPairs,
        runPairsVsBaseline: round(runPairs.ops / baseline.ops, 3),
        stepPairsVsBaseline: round(stepPairs.ops / baseline.ops, 3),
      };
      rows.push(row);
      log(
        `api c=${c}: baseline ${baseline.ops.toFixed(0)} pairs/s | run start+end ${runPairs.ops.toFixed(0)}/s p50 ${runPairs.latency.p50.toFixed(2)} p99 ${runPairs.latency.p99.toFixed(2)} ms | ` +
          `step create+patch ${stepPairs.ops.toFixed(0)}/s p50 ${stepPairs.latency.p50.toFixed(2)} p99 ${stepPairs.latency.p99.toFixed(2)} ms` +
          (runPairs.errors || stepPairs.errors ? ` (ERRORS: ${runPairs.firstError ?? stepPairs.firstError})` : ''),
      );
    } finally {
      await api.close();
      await upstream.close();
    }
  }
  return rows;
}
