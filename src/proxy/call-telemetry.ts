/**
 * A proxied call's span (telemetry/): told when its result is recorded, or when the guard denies
 * it. Only called with telemetry on; off, the proxy makes none of these.
 */
import { NO_TOKENS } from '../contract/provider-usage.js';
import type { RunTelemetry } from '../telemetry/telemetry.js';
import type { RecordResult } from './call-result.js';
import type { Provider } from './provider-registry.js';
import { ProxyRefusal } from './proxy-refusal.js';

/** What a call's span knows before its answer. */
export interface CallSpanStart {
  workspaceId: string;
  requestModel: string | null | undefined;
  path: string;
  provider: Provider;
  startedAt: number;
}

const base = (start: CallSpanStart) => ({
  workspaceId: start.workspaceId,
  type: 'MODEL_CALL',
  provider: start.provider.name,
  providerType: start.provider.type,
  path: start.path.split('?')[0] ?? null,
  requestModel: start.requestModel ?? null,
  startedAt: start.startedAt,
});

/** `record`, telling the step's span how the call ended as it records it. */
export function tracedResult(
  record: RecordResult,
  telemetry: RunTelemetry,
  start: CallSpanStart,
  step: { runId: string; stepId: string },
  traceparent: string | undefined,
): RecordResult {
  return (status, usage, outcome, answerModel = null, notReached) => {
    record(status, usage, outcome, answerModel, notReached);
    telemetry.step(
      {
        ...base(start),
        ...step,
        ...usage,
        responseModel: answerModel,
        status,
        outcome: 'ALLOW',
        reason: typeof outcome.error === 'string' ? outcome.error : null,
        endedAt: Date.now(),
      },
      traceparent,
    );
  };
}

/** A denied call's span, when the denial recorded a step of a named run. */
export function traceDenial(
  telemetry: RunTelemetry,
  start: CallSpanStart,
  runId: string | null,
  error: unknown,
  traceparent: string | undefined,
): void {
  if (!(error instanceof ProxyRefusal) || !error.stepId || runId === null) return;
  telemetry.step(
    {
      ...base(start),
      ...NO_TOKENS,
      runId,
      stepId: error.stepId,
      responseModel: null,
      status: 'BLOCKED',
      outcome: 'DENY',
      reason: error.code,
      endedAt: Date.now(),
    },
    traceparent,
  );
}
