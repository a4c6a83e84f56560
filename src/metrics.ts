/**
 * Prometheus metrics: one Registry per app instance (never prom-client's global one), so several
 * apps can live in one process (tests) without sharing counts or clashing on names.
 *
 * The service layer does not import this module: GuardService takes a `GuardObserver`, and the
 * stores are wrapped (`observeDb`, `observeCounters`) where the app is assembled. Histograms
 * observed on every call find their series without hashing labels (series-histogram.ts).
 */
import { Counter, Registry, collectDefaultMetrics, type Histogram } from 'prom-client';
import { SeriesHistogram } from './series-histogram.js';
import type { GuardObserver } from './guard/guard-context.js';

/** Seconds; from a fast cached decision to a slow model call. */
const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const UPSTREAM_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300];
/** The daemon's own share of a proxied call: it should stay in the low milliseconds. */
const OVERHEAD_BUCKETS = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];
/** An answer's release to its durable result: the window a crash can lose; 50 ms p99 is the goal. */
const RESULT_LAG_BUCKETS = [0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 5];

export interface Metrics {
  readonly registry: Registry;
  /** `boundary` run_start|step, `outcome` ALLOW|DENY, `reason` a deny reason or `none`. */
  readonly decisions: Counter<'boundary' | 'outcome' | 'reason'>;
  /** Per route pattern (`/v1/runs/:run_id`), never the raw URL. */
  readonly httpRequestSeconds: Histogram<'method' | 'route' | 'status_code'>;
  readonly counterStoreErrors: Counter<'operation'>;
  readonly databaseErrors: Counter<'operation' | 'code'>;
  readonly staleRunsEnded: Counter;
  /** Proxied calls of dead daemons ended RESULT_LOST by this daemon's crash recovery. */
  readonly resultsLost: Counter;
  /**
   * For the proxy: time from the release of a call's answer (its last byte, or its failure) to
   * its result committed and the counter copy raised: the window a crash can lose the result in
   * (an upper bound of it: the commit comes before the raise).
   */
  readonly proxyResultLagSeconds: Histogram<'provider'>;
  /**
   * For the proxy: time from sending the request upstream to the end of the upstream answer
   * (last byte of a stream). `provider` is the configured provider name; `outcome` is
   * `ok`, `error` (non-2xx) or `aborted`.
   */
  readonly proxyUpstreamSeconds: Histogram<'provider' | 'outcome'>;
  /** For the proxy: the daemon's own time per proxied call (total minus upstream). */
  readonly proxyOverheadSeconds: Histogram<'provider'>;
  /** MCP tool calls through the sidecar; `outcome` completed, failed or denied. */
  readonly toolCalls: Counter<'server' | 'tool' | 'outcome'>;
  /** MCP tool calls' time from forwarding to their response (allowed calls only). */
  readonly toolCallSeconds: Histogram<'server' | 'outcome'>;
  /** Decisions reach the metrics through this; hand it to GuardService. */
  readonly guardObserver: GuardObserver;
  /** The exposition text and its content type, for `/metrics`. */
  scrape(): Promise<{ contentType: string; body: string }>;
}

export interface MetricsOptions {
  /** Node process metrics (CPU, memory, event loop, GC). @default true */
  processMetrics?: boolean;
  /** Labels added to every series, e.g. `{ instance: 'sidecar-3' }`. */
  defaultLabels?: Record<string, string>;
}

/** The daemon's own work: decisions, HTTP requests, store errors and the background sweeps. */
function registerServiceMetrics(registry: Registry) {
  const decisions = new Counter({
    name: 'runguard_decisions_total',
    help: 'Guardrail decisions recorded, by boundary, outcome and deny reason',
    labelNames: ['boundary', 'outcome', 'reason'] as const,
    registers: [registry],
  });
  const httpRequestSeconds = new SeriesHistogram({
    name: 'runguard_http_request_duration_seconds',
    help: 'HTTP request latency by route pattern',
    labelNames: ['method', 'route', 'status_code'] as const,
    buckets: HTTP_BUCKETS,
    registers: [registry],
  });
  const counterStoreErrors = new Counter({
    name: 'runguard_counter_store_errors_total',
    help: 'Failed counter store operations (Redis or SQL counters)',
    labelNames: ['operation'] as const,
    registers: [registry],
  });
  const databaseErrors = new Counter({
    name: 'runguard_database_errors_total',
    help: 'Database errors other than constraint violations and invalid input, by SQLSTATE or connection error code',
    labelNames: ['operation', 'code'] as const,
    registers: [registry],
  });
  const staleRunsEnded = new Counter({
    name: 'runguard_stale_runs_ended_total',
    help: 'RUNNING runs ended FAILED by the stale-run sweep',
    registers: [registry],
  });
  const resultsLost = new Counter({
    name: 'runguard_results_lost_total',
    help: 'Proxied calls of dead daemons ended FAILED RESULT_LOST (charged at their estimate) by crash recovery',
    registers: [registry],
  });
  return { decisions, httpRequestSeconds, counterStoreErrors, databaseErrors, staleRunsEnded, resultsLost };
}

/** Model calls: the proxy's timings and the calls recorded without a price. */
function registerModelCallMetrics(registry: Registry) {
  const proxyResultLagSeconds = new SeriesHistogram({
    name: 'runguard_proxy_result_lag_seconds',
    help: "Time from a proxied call's answer released to its result committed (and the counter copy raised)",
    labelNames: ['provider'] as const,
    buckets: RESULT_LAG_BUCKETS,
    registers: [registry],
  });
  const unpricedCalls = new Counter({
    name: 'runguard_unpriced_model_calls_total',
    help: 'Model calls recorded with tokens but no active price (counted as $0); the log names each model once per workspace',
    registers: [registry],
  });
  const proxyUpstreamSeconds = new SeriesHistogram({
    name: 'runguard_proxy_upstream_duration_seconds',
    help: 'Upstream time of proxied model calls, to the last byte',
    labelNames: ['provider', 'outcome'] as const,
    buckets: UPSTREAM_BUCKETS,
    registers: [registry],
  });
  const proxyOverheadSeconds = new SeriesHistogram({
    name: 'runguard_proxy_overhead_seconds',
    help: "The daemon's own time per proxied call (total minus upstream)",
    labelNames: ['provider'] as const,
    buckets: OVERHEAD_BUCKETS,
    registers: [registry],
  });
  return { proxyResultLagSeconds, unpricedCalls, proxyUpstreamSeconds, proxyOverheadSeconds };
}

/** MCP tool calls through the sidecar. */
function registerToolCallMetrics(registry: Registry) {
  const toolCalls = new Counter({
    name: 'runguard_tool_calls_total',
    help: 'MCP tool calls through the sidecar, by server, tool and outcome (completed, failed, denied)',
    labelNames: ['server', 'tool', 'outcome'] as const,
    registers: [registry],
  });
  const toolCallSeconds = new SeriesHistogram({
    name: 'runguard_tool_call_duration_seconds',
    help: 'Time of allowed MCP tool calls, from forwarding to their response',
    labelNames: ['server', 'outcome'] as const,
    buckets: UPSTREAM_BUCKETS,
    registers: [registry],
  });

  return { toolCalls, toolCallSeconds };
}

export function createMetrics(options: MetricsOptions = {}): Metrics {
  const registry = new Registry();
  if (options.defaultLabels) registry.setDefaultLabels(options.defaultLabels);
  if (options.processMetrics ?? true) collectDefaultMetrics({ register: registry });
  // Registered in this order, which is the order of the exposition text.
  const service = registerServiceMetrics(registry);
  const { unpricedCalls, ...modelCalls } = registerModelCallMetrics(registry);
  const toolCalls = registerToolCallMetrics(registry);
  const { decisions } = service;

  return {
    registry,
    ...service,
    ...modelCalls,
    ...toolCalls,
    guardObserver: {
      decision(boundary, decision) {
        decisions.inc({ boundary, outcome: decision.outcome, reason: decision.reason ?? 'none' });
      },
      unpricedCall() {
        unpricedCalls.inc();
      },
    },
    async scrape() {
      return { contentType: registry.contentType, body: await registry.metrics() };
    },
  };
}

// --- Proxy timing -----------------------------------------------------------------------------

/** Response header telling a proxy client how much the sidecar added to its call. */
export const OVERHEAD_HEADER = 'x-runguard-overhead-ms';

/** Milliseconds with two decimals, as sent in `x-runguard-overhead-ms`. */
export function formatOverheadMs(ms: number): string {
  return Math.max(0, ms).toFixed(2);
}

/** Sets `x-runguard-overhead-ms` on anything with Fastify's or Node's header setter. */
export function setOverheadHeader(
  target: { header(name: string, value: string): unknown } | { setHeader(name: string, value: string): unknown },
  ms: number,
): void {
  if ('header' in target) target.header(OVERHEAD_HEADER, formatOverheadMs(ms));
  else target.setHeader(OVERHEAD_HEADER, formatOverheadMs(ms));
}

/**
 * A stopwatch for one proxied call, for the proxy to wire in:
 *
 * ```ts
 * const timer = new ProxyCallTimer(metrics, 'openai');   // when the request arrives
 * timer.upstreamStarted();                               // just before undici sends
 * setOverheadHeader(reply, timer.overheadMs());          // when upstream headers arrive
 * timer.finish('ok');                                    // after the last byte (or 'error'/'aborted')
 * ```
 *
 * Overhead is the total time minus the time spent waiting on the upstream.
 */
export class ProxyCallTimer {
  private readonly startedAt: bigint;
  private upstreamAt: bigint | null = null;
  private upstreamNanos = 0n;
  private finished = false;
  /** When the answer was released (`finish`): the result's lag runs from here. */
  private releasedAt: bigint | null = null;

  constructor(
    private readonly metrics:
      | (Pick<Metrics, 'proxyUpstreamSeconds' | 'proxyOverheadSeconds'> &
          Partial<Pick<Metrics, 'proxyResultLagSeconds'>>)
      | null,
    private readonly provider: string,
    /** `process.hrtime.bigint()` at arrival, when the call started before the timer was made. */
    startedAt: bigint = process.hrtime.bigint(),
  ) {
    this.startedAt = startedAt;
  }

  upstreamStarted(): void {
    this.upstreamAt ??= process.hrtime.bigint();
  }

  /** The upstream wait so far (ongoing until `finish`). */
  private upstreamSoFar(now: bigint): bigint {
    return this.upstreamNanos + (this.upstreamAt === null ? 0n : now - this.upstreamAt);
  }

  /** The daemon's own time so far, in milliseconds. */
  overheadMs(now: bigint = process.hrtime.bigint()): number {
    return Number(now - this.startedAt - this.upstreamSoFar(now)) / 1e6;
  }

  /** Records both histograms once; later calls are ignored. Returns the overhead in ms. */
  finish(outcome: 'ok' | 'error' | 'aborted'): number {
    const now = process.hrtime.bigint();
    const overhead = this.overheadMs(now);
    if (this.finished) return overhead;
    this.finished = true;
    this.releasedAt = now;
    if (this.upstreamAt !== null) {
      this.upstreamNanos = this.upstreamSoFar(now);
      this.upstreamAt = null;
      this.metrics?.proxyUpstreamSeconds.observe(
        { provider: this.provider, outcome },
        Number(this.upstreamNanos) / 1e9,
      );
    }
    this.metrics?.proxyOverheadSeconds.observe({ provider: this.provider }, overhead / 1000);
    return overhead;
  }

  /** The call's result committed: observes the time since its answer was released (`finish`), once. */
  resultRecorded(): void {
    if (this.releasedAt === null) return;
    const lag = Number(process.hrtime.bigint() - this.releasedAt) / 1e9;
    this.releasedAt = null;
    this.metrics?.proxyResultLagSeconds?.observe({ provider: this.provider }, lag);
  }
}
