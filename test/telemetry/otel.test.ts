/**
 * OpenTelemetry end to end: the real daemon, started with the standard OTEL_* variables, exports
 * to a loopback OTLP/HTTP collector a trace per run (its `invoke_agent` span, in the trace of the
 * `traceparent` its start carried) with a span per step (GenAI conventions and runguard's own
 * attributes, the child of its request's traceparent, else of the run's span), and the GenAI
 * client metrics. A collector that refuses spans costs them: they are counted in /metrics.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ROOT, spawnDaemonOnPostgres } from '../support/daemon.js';
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { caller, type Caller } from '../support/harness.js';
import { startOtlpReceiver, type OtlpReceiver } from '../support/otlp-receiver.js';
import { metricValue, parseMetrics } from '../support/prometheus.js';
import { REDIS_URL, testKeyPrefix } from '../support/services.js';

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const PRICES = { input_cost_per_token: 0.000001, output_cost_per_token: 0.000004 };

let collector: OtlpReceiver;
let upstream: FakeUpstream;
let daemon: Awaited<ReturnType<typeof spawnDaemonOnPostgres>>;
let api: Caller;

beforeAll(async () => {
  [collector, upstream] = await Promise.all([startOtlpReceiver(), startFakeUpstream()]);
  daemon = await spawnDaemonOnPostgres({
    env: {
      REDIS_URL,
      RUNGUARD_REDIS_KEY_PREFIX: testKeyPrefix(),
      RUNGUARD_OPENAI_UPSTREAM: upstream.url,
      RUNGUARD_ANTHROPIC_UPSTREAM: upstream.url,
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
      OTEL_SERVICE_NAME: 'runguard-under-test',
      OTEL_BSP_SCHEDULE_DELAY: '100',
      OTEL_METRIC_EXPORT_INTERVAL: '300',
    },
  });
  api = caller(daemon.url, daemon.apiKey);
  for (const model of ['gpt-4o-mini', 'claude-test-1']) {
    expect((await api.request('PUT', `/v1/model-pricing/${model}`, PRICES)).status).toBe(200);
  }
}, 60_000);

afterAll(async () => {
  await daemon?.close();
  await upstream?.close();
  await collector?.close();
});

async function until<T>(read: () => T | undefined | false, what: string): Promise<T> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const value = read();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function exec(args: string[], env: Record<string, string>): Promise<number | null> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, 'exec', ...args], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', RUNGUARD_URL: daemon.url, RUNGUARD_API_KEY: daemon.apiKey!, ...env },
      stdio: 'ignore',
    });
    child.once('exit', resolve);
  });
}

describe('OpenTelemetry export', () => {
  it("a run under exec is a trace: its invoke_agent span in exec's trace, a span per step under it, and metrics", async () => {
    const status = await exec(
      ['--user', 'otel-user', '--', process.execPath, join(ROOT, 'test/fixtures/agent.mjs'), '0'],
      {
        TRACEPARENT: `00-${TRACE_ID}-00f067aa0ba902b7-01`,
      },
    );
    expect(status).toBe(0);
    const runSpan = await until(
      () => collector.spans.find((s) => s.name === 'invoke_agent' && s.attributes['runguard.user_id'] === 'otel-user'),
      'the run span',
    );
    expect(runSpan.traceId).toBe(TRACE_ID);
    expect(runSpan.resource['service.name']).toBe('runguard-under-test');
    expect(runSpan.attributes).toMatchObject({
      'gen_ai.operation.name': 'invoke_agent',
      'runguard.run_id': expect.stringMatching(/^[0-9a-f-]{36}$/),
      'runguard.decision.outcome': 'ALLOW',
      'runguard.run.status': 'COMPLETED',
    });
    const runId = runSpan.attributes['runguard.run_id'];
    const steps = await until(() => {
      const found = collector.spans.filter((s) => s.attributes['runguard.run_id'] === runId && s !== runSpan);
      return found.length === 3 && found;
    }, 'three step spans');
    const detail = (await api.request<any>('GET', `/v1/runs/${runId}`)).body;
    for (const span of steps) {
      expect(span.traceId).toBe(TRACE_ID);
      expect(span.parentSpanId).toBe(runSpan.spanId);
      const step = detail.steps.find((s: any) => s.id === span.attributes['runguard.step_id']);
      expect(span.attributes).toMatchObject({
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': step.input_data.provider,
        'gen_ai.request.model': step.model,
        'gen_ai.usage.input_tokens': step.prompt_tokens,
        'gen_ai.usage.output_tokens': step.completion_tokens,
        'runguard.decision.outcome': 'ALLOW',
        'runguard.user_id': 'otel-user',
      });
      expect(span.attributes['runguard.cost_usd']).toBeCloseTo(step.cost_usd, 12);
      expect(span.name).toBe(`chat ${step.model}`);
    }
    // Metrics are exported every so often: wait for the points of every step, not the first export.
    const usage = await until(() => {
      const points = collector.metrics.get('gen_ai.client.token.usage') ?? [];
      const input = points.some(
        (p) => p['gen_ai.token.type'] === 'input' && p['gen_ai.request.model'] === 'gpt-4o-mini',
      );
      return input && points.some((p) => p['gen_ai.token.type'] === 'output') && points;
    }, 'token usage of the OpenAI step, input and output');
    expect(usage.length).toBeGreaterThanOrEqual(2);
    const durations = await until(() => {
      const points = collector.metrics.get('gen_ai.client.operation.duration') ?? [];
      return points.some((p) => p['gen_ai.provider.name'] === 'anthropic') && points;
    }, "the Anthropic step's duration");
    expect(durations.length).toBeGreaterThanOrEqual(1);
  });

  it("a step's span is the child of its own request's traceparent; a denied step's says why", async () => {
    const run = await api.request<any>('POST', '/v1/runs', { user_id: 'otel-2', limits: { max_steps: 1 } });
    const url = `${daemon.url}/proxy/runs/${run.body.id}/openai/v1/chat/completions`;
    const headers = {
      'content-type': 'application/json',
      'x-runguard-key': daemon.apiKey!,
      traceparent: `00-${TRACE_ID}-b7ad6b7169203331-01`,
    };
    const body = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    expect((await fetch(url, { method: 'POST', headers, body })).status).toBe(200);
    expect((await fetch(url, { method: 'POST', headers, body })).status).toBe(403);
    const spans = await until(() => {
      const found = collector.spans.filter(
        (s) => s.attributes['runguard.run_id'] === run.body.id && s.name !== 'invoke_agent',
      );
      return found.length === 2 && found;
    }, 'both step spans');
    for (const span of spans) {
      expect(span.traceId).toBe(TRACE_ID);
      expect(span.parentSpanId).toBe('b7ad6b7169203331');
    }
    const denied = spans.find((s) => s.attributes['runguard.decision.outcome'] === 'DENY')!;
    expect(denied.attributes['runguard.decision.reason']).toBe('RUN_STEP_LIMIT_EXCEEDED');
    expect(denied.status.code).toBe(2);
  });

  it('spans the collector refuses are dropped and counted in /metrics', async () => {
    collector.answer(400);
    try {
      const run = await api.request<any>('POST', '/v1/runs', { user_id: 'otel-3' });
      await api.request('POST', `/v1/runs/${run.body.id}/end`, { status: 'COMPLETED' });
      const value = await (async () => {
        const deadline = Date.now() + 15_000;
        for (;;) {
          const text = await (await fetch(`${daemon.url}/metrics`)).text();
          const count = metricValue(parseMetrics(text), 'runguard_otel_dropped_spans_total');
          if (count > 0) return count;
          if (Date.now() > deadline) throw new Error(`no dropped spans counted:\n${text.slice(0, 2000)}`);
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      expect(value).toBeGreaterThan(0);
    } finally {
      collector.answer(200);
    }
  });
});
