import { callCost, type TokenPrices } from '../money/cost.js';

/**
 * What the daemon tells an OpenTelemetry backend: a trace per run (its span, `invoke_agent`) with
 * a span per step, and the GenAI client metrics. Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or its
 * traces variant) is set: then, and only then, the OpenTelemetry SDK is loaded (otel-telemetry.ts);
 * off, every call here is a no-op on a frozen object.
 */

/** A run as its span reads it. */
export interface RunStart {
  id: string;
  userId: string;
  workspaceId: string;
  status: string;
  outcome: string;
  reason: string | null;
}

/** A step as its span reads it, told once: when its result is recorded, or when it is denied. */
export interface StepReport {
  workspaceId: string;
  runId: string;
  stepId: string;
  /** The step's type (`MODEL_CALL`, `TOOL_CALL`, ...). */
  type: string;
  /** The provider's name in the proxy (`openai`, `anthropic`, `google`, ...), null outside it. */
  provider: string | null;
  /** The provider's API (`openai`, `anthropic`, `google`), which names the GenAI system. */
  providerType: string | null;
  /** The upstream path, which tells the operation (chat, embeddings, ...). */
  path: string | null;
  requestModel: string | null;
  responseModel: string | null;
  toolName?: string | null;
  status: 'COMPLETED' | 'FAILED' | 'BLOCKED';
  outcome: 'ALLOW' | 'DENY';
  reason: string | null;
  /** Epoch milliseconds. */
  startedAt: number;
  endedAt: number;
  promptTokens: number | null;
  completionTokens: number | null;
  cacheReadTokens: number | null;
  cacheWriteTokens: number | null;
  reasoningTokens: number | null;
  /** Its cost in USD, as priced by the workspace's prices (`pricedSteps`); null: unpriced. */
  costUsd?: number | null;
}

export interface RunTelemetry {
  readonly enabled: boolean;
  /** @param traceparent the W3C trace context of the start request, if it carried one */
  runStarted(run: RunStart, traceparent: string | undefined): void;
  runEnded(runId: string, status: string): void;
  /** @param traceparent the step's own request's trace context: its span's parent, else the run's span */
  step(report: StepReport, traceparent: string | undefined): void;
  /** Spans dropped (queue full, or the collector refused or was down). */
  droppedSpans(): number;
  /** Ends the runs' spans still open and flushes what is queued. */
  shutdown(): Promise<void>;
}

export const NO_TELEMETRY: RunTelemetry = Object.freeze({
  enabled: false,
  runStarted() {},
  runEnded() {},
  step() {},
  droppedSpans: () => 0,
  shutdown: () => Promise.resolve(),
});

/** Whether the environment asks for traces: the OpenTelemetry SDK's own variables. */
export function telemetryWanted(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  if (env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === 'none') return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim());
}

/** The daemon's telemetry: the SDK loaded only when the environment asks for it. */
export async function loadTelemetry(env: NodeJS.ProcessEnv, version: string): Promise<RunTelemetry> {
  if (!telemetryWanted(env)) return NO_TELEMETRY;
  const { openTelemetry } = await import('./otel-telemetry.js');
  return openTelemetry(env, version);
}

/** The workspace's token prices of a model (the guard's price book), null when it has none. */
export type PriceLookup = (workspaceId: string, model: string) => Promise<TokenPrices | null>;

/**
 * `inner`, its steps priced first (`costUsd`) from the workspace's prices, the same rule the
 * records use (money/cost.ts). Off, it is `inner` itself: nothing is priced for nobody.
 */
export function pricedSteps(inner: RunTelemetry, prices: PriceLookup): RunTelemetry {
  if (!inner.enabled) return inner;
  return {
    ...inner,
    step(report, traceparent) {
      const model = report.responseModel ?? report.requestModel;
      const priced =
        report.outcome === 'ALLOW' && model
          ? prices(report.workspaceId, model).then((p) => {
              const cost = p ? callCost(report, p) : null;
              return cost === null ? null : Number(cost);
            })
          : Promise.resolve(null);
      void priced.catch(() => null).then((costUsd) => inner.step({ ...report, costUsd }, traceparent));
    },
  };
}

/** A W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), as `exec` makes one for a run's trace. */
export function newTraceparent(randomHex: (bytes: number) => string): string {
  return `00-${randomHex(16)}-${randomHex(8)}-01`;
}

/** The header's value when it is a well-formed W3C traceparent, else undefined. */
export function traceparentOf(value: string | string[] | undefined): string | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  return text !== undefined && /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/.test(text.trim())
    ? text.trim()
    : undefined;
}
