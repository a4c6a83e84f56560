/**
 * The OpenTelemetry SDK behind telemetry.ts, loaded only when configured. Exports over OTLP/HTTP
 * (the exporters read the standard `OTEL_EXPORTER_OTLP_*` variables: endpoint, headers, timeout)
 * with the GenAI semantic conventions. The hot path only starts and ends spans; export is batched
 * off it, through a bounded queue: a span that finds it full, or that the collector refuses or
 * cannot take, is dropped and counted.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { ExportResultCode, type ExportResult } from '@opentelemetry/core';
import { OTLPMetricExporter } from '@opentelemetry/exporter-metrics-otlp-http';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import type { RunStart, RunTelemetry, StepReport } from './telemetry.js';

/** Spans waiting for export at most; more are dropped (and counted). */
const MAX_QUEUED_SPANS = 2048;
/** Runs whose span is open, at most: past it the oldest is ended early (a run ended elsewhere). */
const MAX_OPEN_RUNS = 10_000;

/** `gen_ai.provider.name` of each provider API (the semantic conventions' names). */
const GEN_AI_PROVIDER: Record<string, string> = { openai: 'openai', anthropic: 'anthropic', google: 'gcp.gemini' };

/** `gen_ai.operation.name` of a step, from its type and path. */
function operationOf(report: StepReport): string {
  if (report.type === 'TOOL_CALL') return 'execute_tool';
  const path = report.path ?? '';
  if (/embed/i.test(path)) return 'embeddings';
  if (/:(stream)?generateContent/.test(path)) return 'generate_content';
  if (/\/completions$/.test(path) && !/\/chat\/completions$/.test(path)) return 'text_completion';
  return 'chat';
}

/** A W3C traceparent as a remote parent context; undefined when malformed. */
function parentFrom(traceparent: string | undefined): Context | undefined {
  if (!traceparent) return undefined;
  const [, traceId, spanId, flags] = traceparent.split('-');
  if (!traceId || !spanId || /^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId,
    spanId,
    traceFlags: parseInt(flags ?? '01', 16) & TraceFlags.SAMPLED,
    isRemote: true,
  });
}

const defined = (attributes: Record<string, string | number | null | undefined>): Attributes =>
  Object.fromEntries(Object.entries(attributes).filter(([, v]) => v !== null && v !== undefined)) as Attributes;

/** Counts what never reaches the collector: spans over the queue's bound, and batches it failed. */
class DropCounter {
  queued = 0;
  dropped = 0;
}

class CountingExporter implements SpanExporter {
  constructor(
    private readonly inner: SpanExporter,
    private readonly counter: DropCounter,
  ) {}
  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.inner.export(spans, (result) => {
      this.counter.queued -= spans.length;
      if (result.code !== ExportResultCode.SUCCESS) this.counter.dropped += spans.length;
      done(result);
    });
  }
  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}

class BoundedProcessor implements SpanProcessor {
  constructor(
    private readonly inner: SpanProcessor,
    private readonly counter: DropCounter,
  ) {}
  onStart(): void {}
  onEnd(span: ReadableSpan): void {
    if (this.counter.queued >= MAX_QUEUED_SPANS) {
      this.counter.dropped++;
      return;
    }
    this.counter.queued++;
    this.inner.onEnd(span);
  }
  forceFlush(): Promise<void> {
    return this.inner.forceFlush();
  }
  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
}

/** The span attributes of a step beyond the GenAI ones it shares with its metrics. */
function stepAttributes(report: StepReport, userId: string | undefined): Attributes {
  return defined({
    'gen_ai.response.model': report.responseModel,
    'gen_ai.tool.name': report.toolName,
    'gen_ai.usage.input_tokens': report.promptTokens,
    'gen_ai.usage.output_tokens': report.completionTokens,
    'gen_ai.usage.cache_read.input_tokens': report.cacheReadTokens,
    'gen_ai.usage.cache_creation.input_tokens': report.cacheWriteTokens,
    'runguard.usage.reasoning_tokens': report.reasoningTokens,
    'runguard.decision.outcome': report.outcome,
    'runguard.decision.reason': report.reason,
    'runguard.cost_usd': report.costUsd,
    'runguard.user_id': userId,
    'runguard.run_id': report.runId,
    'runguard.step_id': report.stepId,
    'runguard.provider': report.provider,
    'runguard.step.status': report.status,
  });
}

type Resource = ReturnType<typeof resourceFromAttributes>;

/** Spans go out in batches through a bounded queue that counts what it drops. */
function startTracing(resource: Resource, version: string) {
  const counter = new DropCounter();
  const exporter = new CountingExporter(new OTLPTraceExporter(), counter);
  const tracerProvider = new BasicTracerProvider({
    resource,
    spanProcessors: [
      new BoundedProcessor(
        new BatchSpanProcessor(exporter, { maxQueueSize: MAX_QUEUED_SPANS, maxExportBatchSize: 512 }),
        counter,
      ),
    ],
  });
  return { counter, tracerProvider, tracer: tracerProvider.getTracer('runguard', version) };
}

/** The GenAI client metrics: token usage and operation duration, exported periodically. */
function startGenAiMetrics(env: NodeJS.ProcessEnv, resource: Resource, version: string) {
  const meterProvider = new MeterProvider({
    resource,
    readers: [
      new PeriodicExportingMetricReader({
        exporter: new OTLPMetricExporter(),
        exportIntervalMillis: Number(env.OTEL_METRIC_EXPORT_INTERVAL) || 60_000,
      }),
    ],
  });
  const meter = meterProvider.getMeter('runguard', version);
  const tokenUsage = meter.createHistogram('gen_ai.client.token.usage', {
    description: 'Tokens used by a model call',
    unit: '{token}',
  });
  const duration = meter.createHistogram('gen_ai.client.operation.duration', {
    description: 'Duration of a model call',
    unit: 's',
  });
  return { meterProvider, tokenUsage, duration };
}

type GenAiInstruments = Omit<ReturnType<typeof startGenAiMetrics>, 'meterProvider'>;

/** An allowed model call's duration and token usage, as GenAI client metrics. */
function recordModelCall(instruments: GenAiInstruments, report: StepReport, common: Attributes): void {
  instruments.duration.record((report.endedAt - report.startedAt) / 1000, {
    ...common,
    ...(report.status === 'COMPLETED' ? {} : { 'error.type': report.reason ?? 'FAILED' }),
  });
  if (report.promptTokens !== null)
    instruments.tokenUsage.record(report.promptTokens, { ...common, 'gen_ai.token.type': 'input' });
  if (report.completionTokens !== null)
    instruments.tokenUsage.record(report.completionTokens, { ...common, 'gen_ai.token.type': 'output' });
}

/** The `invoke_agent` span of a run, under the caller's trace when it sent one. */
function startRunSpan(tracer: Tracer, run: RunStart, traceparent: string | undefined): Span {
  return tracer.startSpan(
    'invoke_agent',
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        'gen_ai.operation.name': 'invoke_agent',
        'runguard.run_id': run.id,
        'runguard.user_id': run.userId,
        'runguard.decision.outcome': run.outcome,
        ...defined({ 'runguard.decision.reason': run.reason }),
      },
    },
    parentFrom(traceparent) ?? ROOT_CONTEXT,
  );
}

export function openTelemetry(env: NodeJS.ProcessEnv, version: string): RunTelemetry {
  const resource = resourceFromAttributes({
    'service.name': env.OTEL_SERVICE_NAME?.trim() || 'runguard',
    'service.version': version,
  });
  const { counter, tracerProvider, tracer } = startTracing(resource, version);
  const { meterProvider, ...genAi } = startGenAiMetrics(env, resource, version);

  const runs = new Map<string, { span: Span; context: Context; userId: string }>();

  function endRunSpan(runId: string, status: string): void {
    const run = runs.get(runId);
    if (!run) return;
    runs.delete(runId);
    run.span.setAttribute('runguard.run.status', status);
    if (status === 'FAILED') run.span.setStatus({ code: SpanStatusCode.ERROR, message: 'run FAILED' });
    run.span.end();
  }

  function emitStep(report: StepReport, traceparent: string | undefined): void {
    const run = runs.get(report.runId);
    const parent = parentFrom(traceparent) ?? run?.context ?? ROOT_CONTEXT;
    const operation = operationOf(report);
    const providerName = report.providerType ? (GEN_AI_PROVIDER[report.providerType] ?? report.providerType) : null;
    const common = defined({
      'gen_ai.operation.name': operation,
      'gen_ai.provider.name': providerName,
      'gen_ai.request.model': report.requestModel,
    });
    const span = tracer.startSpan(
      `${operation} ${report.requestModel ?? report.toolName ?? ''}`.trim(),
      {
        kind: SpanKind.CLIENT,
        startTime: report.startedAt,
        attributes: {
          ...common,
          ...stepAttributes(report, run?.userId),
        },
      },
      parent,
    );
    if (report.status !== 'COMPLETED') {
      span.setAttribute('error.type', report.reason ?? report.status);
      span.setStatus({ code: SpanStatusCode.ERROR, message: report.reason ?? report.status });
    }
    span.end(report.endedAt);
    if (report.outcome === 'ALLOW' && report.type === 'MODEL_CALL') recordModelCall(genAi, report, common);
  }

  return {
    enabled: true,
    runStarted(run: RunStart, traceparent) {
      const span = startRunSpan(tracer, run, traceparent);
      if (run.status === 'BLOCKED') {
        span.setStatus({ code: SpanStatusCode.ERROR, message: run.reason ?? 'BLOCKED' });
        span.setAttribute('runguard.run.status', 'BLOCKED');
        span.end();
        return;
      }
      if (runs.size >= MAX_OPEN_RUNS) endRunSpan(runs.keys().next().value!, 'UNKNOWN');
      runs.set(run.id, { span, context: trace.setSpan(ROOT_CONTEXT, span), userId: run.userId });
    },
    runEnded: endRunSpan,
    step: emitStep,
    droppedSpans: () => counter.dropped,
    async shutdown() {
      for (const runId of [...runs.keys()]) endRunSpan(runId, 'RUNNING');
      await Promise.allSettled([tracerProvider.shutdown(), meterProvider.shutdown()]);
    },
  };
}
