/** The measured scenarios: proxy (direct / floor / I/O floor / sidecar), SSE streams, and the run API. */
import { Pool } from 'undici';
import { pooledCell, type CellResult, type Target } from './load.js';
import { alternate, json, pool, pooledLoop, pooledStreams, type LoopResult, type StreamTimes } from './loops.js';
import type { DaemonProcess } from './processes.js';
import { round } from './stats.js';

export const MODEL = 'gpt-4o-mini';
const CHAT = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Say hello in five words.' }] });
const CHAT_STREAM = JSON.stringify({
  model: MODEL,
  messages: [{ role: 'user', content: 'Say hello in five words.' }],
  stream: true,
  stream_options: { include_usage: true },
});
/** The provider credential a real SDK would send; the sidecar forwards it untouched. */
const PROVIDER_AUTH = 'Bearer sk-bench-not-a-real-key';

export interface Endpoints {
  /** Fake upstream origin. */
  upstream: string;
  /** Bare pass-through proxy origin. */
  floor: string;
  /** The same proxy with the waits a guarded call must have (`floor-proxy.ts --io`). */
  ioFloor: string;
  daemon: DaemonProcess;
  /** A RUNNING run for the run-scoped proxy URL. */
  runId: string;
}

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
export function chatTarget(daemon: DaemonProcess, runId: string | null, body = CHAT): Target {
  return runId === null
    ? { url: `${daemon.url}/proxy/openai/chat/completions`, method: 'POST', headers: sidecarHeaders(daemon), body }
    : {
        url: `${daemon.url}/proxy/runs/${runId}/openai/chat/completions`,
        method: 'POST',
        headers: { ...PROVIDER_HEADERS, 'x-runguard-key': daemon.apiKey },
        body,
      };
}

function targets(
  e: Endpoints,
  body: string,
): Record<'direct' | 'floor' | 'ioFloor' | 'sidecar' | 'sidecarPerCallRun', Target> {
  return {
    direct: { url: `${e.upstream}/v1/chat/completions`, method: 'POST', headers: PROVIDER_HEADERS, body },
    floor: { url: `${e.floor}/v1/chat/completions`, method: 'POST', headers: PROVIDER_HEADERS, body },
    ioFloor: { url: `${e.ioFloor}/v1/chat/completions`, method: 'POST', headers: PROVIDER_HEADERS, body },
    sidecar: chatTarget(e.daemon, e.runId, body),
    sidecarPerCallRun: chatTarget(e.daemon, null, body),
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

export interface ProxyRow {
  connections: number;
  direct: CellResult;
  floor: CellResult;
  ioFloor: CellResult;
  sidecar?: CellResult;
  sidecarPerCallRun?: CellResult;
  floorAdded: Added;
  ioFloorAdded: Added;
  sidecarAdded?: Added;
  sidecarPerCallRunAdded?: Added;
  /** Sidecar throughput over floor throughput. */
  sidecarVsFloorRps?: number;
  floorVsDirectRps: number;
}

export async function proxyScenario(
  e: Endpoints,
  withSidecar: boolean,
  connections: number[],
  durationS: number,
  rounds: number,
  log: (line: string) => void,
): Promise<ProxyRow[]> {
  const t = targets(e, CHAT);
  const rows: ProxyRow[] = [];
  for (const c of connections) {
    // Alternated in rounds within one cell per connection count, so all of them see the same machine noise.
    const cells = {
      direct: pooledCell(t.direct, c),
      floor: pooledCell(t.floor, c),
      ioFloor: pooledCell(t.ioFloor, c),
      ...(withSidecar ? { sidecar: pooledCell(t.sidecar, c), perCall: pooledCell(t.sidecarPerCallRun, c) } : {}),
    };
    await alternate(Object.values(cells), rounds, durationS);
    const [direct, floor, ioFloor] = [cells.direct.result(), cells.floor.result(), cells.ioFloor.result()];
    const sidecar = cells.sidecar?.result();
    const perCall = cells.perCall?.result();
    const row: ProxyRow = {
      connections: c,
      direct,
      floor,
      floorAdded: added(floor, direct),
      ioFloor,
      ioFloorAdded: added(ioFloor, direct),
      floorVsDirectRps: round(floor.rps / direct.rps, 3),
      ...(sidecar && perCall
        ? {
            sidecar,
            sidecarPerCallRun: perCall,
            sidecarAdded: added(sidecar, direct),
            sidecarPerCallRunAdded: added(perCall, direct),
            sidecarVsFloorRps: round(sidecar.rps / floor.rps, 3),
          }
        : {}),
    };
    rows.push(row);
    log(
      `proxy c=${c}: direct ${direct.rps.toFixed(0)}/s p50 ${direct.latency.p50.toFixed(2)} p99 ${direct.latency.p99.toFixed(2)} ms | ` +
        `floor ${floor.rps.toFixed(0)}/s ${signed(row.floorAdded.p50)}/${signed(row.floorAdded.p99)} ms | ` +
        `I/O floor ${ioFloor.rps.toFixed(0)}/s ${signed(row.ioFloorAdded.p50)}/${signed(row.ioFloorAdded.p99)} ms` +
        (sidecar
          ? ` | sidecar ${sidecar.rps.toFixed(0)}/s ${signed(row.sidecarAdded!.p50)}/${signed(row.sidecarAdded!.p99)} ms (${row.sidecarVsFloorRps} of floor)` +
            ` | per-call run ${perCall!.rps.toFixed(0)}/s ${signed(row.sidecarPerCallRunAdded!.p50)}/${signed(row.sidecarPerCallRunAdded!.p99)} ms`
          : '') +
        ([direct, floor, ioFloor, sidecar, perCall].some((x) => x && (x.errors || x.non2xx))
          ? ' (ERRORS: see JSON)'
          : ''),
    );
  }
  return rows;
}

export interface SseRow {
  connections: number;
  direct: StreamTimes;
  floor: StreamTimes;
  ioFloor: StreamTimes;
  sidecar?: StreamTimes;
  floorAdded: { ttfb: Added; ttlb: Added };
  ioFloorAdded: { ttfb: Added; ttlb: Added };
  sidecarAdded?: { ttfb: Added; ttlb: Added };
}

export async function sseScenario(
  e: Endpoints,
  withSidecar: boolean,
  connections: number[],
  durationS: number,
  rounds: number,
  log: (line: string) => void,
): Promise<SseRow[]> {
  const t = targets(e, CHAT_STREAM);
  const rows: SseRow[] = [];
  const addedTimes = (x: StreamTimes, base: StreamTimes) => ({
    ttfb: added({ latency: x.ttfb }, { latency: base.ttfb }),
    ttlb: added({ latency: x.ttlb }, { latency: base.ttlb }),
  });
  for (const c of connections) {
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
    let direct: StreamTimes, floor: StreamTimes, ioFloor: StreamTimes, sidecar: StreamTimes | undefined;
    try {
      const cells = {
        direct: streams(t.direct),
        floor: streams(t.floor),
        ioFloor: streams(t.ioFloor),
        ...(withSidecar ? { sidecar: streams(t.sidecar) } : {}),
      };
      await alternate(Object.values(cells), rounds, durationS);
      [direct, floor, ioFloor, sidecar] = [
        cells.direct.result(),
        cells.floor.result(),
        cells.ioFloor.result(),
        cells.sidecar?.result(),
      ];
    } finally {
      await Promise.all(dispatchers.map((d) => d.close()));
    }
    const row: SseRow = {
      connections: c,
      direct,
      floor,
      floorAdded: addedTimes(floor, direct),
      ioFloor,
      ioFloorAdded: addedTimes(ioFloor, direct),
      ...(sidecar ? { sidecar, sidecarAdded: addedTimes(sidecar, direct) } : {}),
    };
    rows.push(row);
    log(
      `sse c=${c}: direct ttfb p50 ${direct.ttfb.p50.toFixed(2)} p99 ${direct.ttfb.p99.toFixed(2)} ms | ` +
        `floor ${signed(row.floorAdded.ttfb.p50)}/${signed(row.floorAdded.ttfb.p99)} ms | I/O floor ${signed(row.ioFloorAdded.ttfb.p50)}/${signed(row.ioFloorAdded.ttfb.p99)} ms` +
        (sidecar
          ? ` | sidecar ttfb ${signed(row.sidecarAdded!.ttfb.p50)}/${signed(row.sidecarAdded!.ttfb.p99)} ms, ttlb ${signed(row.sidecarAdded!.ttlb.p50)}/${signed(row.sidecarAdded!.ttlb.p99)} ms`
          : '') +
        ([direct, floor, ioFloor, sidecar].some((x) => x?.errors)
          ? ` (ERRORS: ${[direct, floor, ioFloor, sidecar].find((x) => x?.errors)?.firstError})`
          : ''),
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
    const upstream = pool(e.upstream, c);
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
