/**
 * Hostile bodies on the proxy (issue #48, items 1 and 3): a body is read for what it asks of the
 * model whatever its content type says, and a body no provider would serve (a count past any real
 * one, nesting thousands of levels deep) is the client's error, answered 400 in the provider's
 * format and never forwarded. The real app on a socket, in front of a fake upstream on loopback.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { estimateCallMicros } from '../../src/money/call-estimate.js';
import { requestBounds } from '../../src/proxy/request-bounds.js';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

const MODEL = 'gpt-4o-mini';
const PRICES = { input_cost_per_token: 0.000001, output_cost_per_token: 0.000004 };

let api: ProxyTestApi;

beforeAll(async () => {
  api = await startProxyTestApi('postgres+redis');
  expect((await api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
});
afterAll(async () => {
  await api?.close();
});

interface Answer {
  status: number;
  body: any;
  headers: Headers;
}

/** A proxied call with a raw body; `path` after `/proxy/`. */
async function proxied(
  path: string,
  body: string,
  headers: Record<string, string> = {},
  apiKey = api.apiKey,
): Promise<Answer> {
  const res = await fetch(`${api.url}/proxy/${path}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: 'Bearer sk-provider',
      'x-runguard-key': apiKey,
      'x-runguard-user-id': 'agent-1',
      ...headers,
    },
    body,
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* kept as text */
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

async function startRun(limits: Record<string, unknown> = {}): Promise<string> {
  const res = await api.request('POST', '/v1/runs', { user_id: 'agent-1', limits });
  expect(res.status).toBe(201);
  return res.body.id;
}

/** `depth` nested arrays around `inner`. */
const nested = (depth: number, inner = '1') => '['.repeat(depth) + inner + ']'.repeat(depth);

describe('hostile bodies on the proxy', () => {
  it('when a chat asks for n: 1e308 completions, then 400 in OpenAI’s format, nothing forwarded', async () => {
    const before = api.upstream.requests.length;
    const res = await proxied('openai/v1/chat/completions', `{"model":"${MODEL}","messages":[],"n":1e308}`);
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'BAD_REQUEST' });
    expect(res.body.error.message).toMatch(/"n" must be at most/);
    expect(res.headers.get('x-should-retry')).toBe('false');
    expect(api.upstream.requests.length).toBe(before);
  });

  it('when max_tokens or best_of is past any real count, then 400 too; a real one is forwarded', async () => {
    for (const field of ['max_tokens', 'max_completion_tokens', 'best_of']) {
      const res = await proxied('openai/v1/chat/completions', `{"model":"${MODEL}","messages":[],"${field}":1e20}`);
      expect(res.status, field).toBe(400);
    }
    const ok = await proxied('openai/v1/chat/completions', JSON.stringify({ model: MODEL, messages: [], n: 2 }));
    expect(ok.status).toBe(200);
  });

  it('when a body nests 2,400 levels deep in a run with max_identical_calls, then 400, not a stack overflow', async () => {
    const runId = await startRun({ max_identical_calls: 3 });
    const before = api.upstream.requests.length;
    const body = `{"model":"${MODEL}","messages":[{"role":"user","content":${nested(2_400, '"deep"')}}]}`;
    for (const provider of ['openai/v1/chat/completions', 'anthropic/v1/messages']) {
      const res = await proxied(`runs/${runId}/${provider}`, body);
      expect(res.status, provider).toBe(400);
      expect(res.body.error.message).toMatch(/nests deeper than 128 levels/);
      if (provider.startsWith('anthropic')) expect(res.body).toMatchObject({ type: 'error' });
    }
    expect(api.upstream.requests.length).toBe(before);
    // The run is unharmed: a plain call in it goes through.
    const ok = await proxied(
      `runs/${runId}/openai/v1/chat/completions`,
      JSON.stringify({ model: MODEL, messages: [] }),
    );
    expect(ok.status).toBe(200);
  });

  it('when a body nests 128 levels, then it is served (the bound is not a tight one)', async () => {
    const runId = await startRun({ max_identical_calls: 3 });
    const body = `{"model":"${MODEL}","messages":[],"metadata":${nested(126)}}`;
    const res = await proxied(`runs/${runId}/openai/v1/chat/completions`, body);
    expect(res.status).toBe(200);
  });

  it('when random hostile bodies arrive, then every answer is below 500 (fuzzed)', async () => {
    const runId = await startRun({ max_identical_calls: 2 });
    const hugeNumber = fc.oneof(
      fc.constantFrom(1e308, -1e308, 2 ** 53 + 1, 1e21, 0.5, -0, 1e-320),
      fc.double(),
      fc.integer(),
    );
    const field = fc.constantFrom('n', 'best_of', 'max_tokens', 'max_completion_tokens', 'max_output_tokens');
    const body = fc.oneof(
      fc.record({ field, value: hugeNumber }).map(({ field: name, value }) => {
        const text = Number.isFinite(value) ? String(value) : '1e400';
        return `{"model":"${MODEL}","messages":[],"${name}":${text}}`;
      }),
      fc.integer({ min: 100, max: 5_000 }).map((depth) => `{"model":"${MODEL}","input":${nested(depth)}}`),
      fc.json({ maxDepth: 6 }),
    );
    const path = fc.constantFrom(
      `runs/${runId}/openai/v1/chat/completions`,
      `runs/${runId}/openai/v1/completions`,
      `runs/${runId}/openai/v1/responses`,
      `runs/${runId}/anthropic/v1/messages`,
    );
    await fc.assert(
      fc.asyncProperty(path, body, async (at, text) => {
        const res = await proxied(at, text);
        expect(res.status, `${at} ${text.slice(0, 80)}`).toBeLessThan(500);
      }),
      { numRuns: 60 },
    );
  });
});

describe('the cost estimate of any bounds', () => {
  it('when a request says anything of its size, then the estimate is a whole number within the cap or a 400', () => {
    const prices = { input: '0.000001', output: '0.000004', cacheRead: null, cacheWrite: null };
    fc.assert(
      fc.property(fc.anything(), fc.nat(), (value, bytes) => {
        let bounds;
        try {
          bounds = requestBounds('/v1/completions', { n: value, best_of: value, max_tokens: value }, bytes);
        } catch (error) {
          expect(error).toMatchObject({ code: 'BAD_REQUEST', statusCode: 400 });
          return;
        }
        const micros = estimateCallMicros(bounds, MODEL, prices, 1e12);
        expect(Number.isSafeInteger(micros)).toBe(true);
      }),
    );
    // Bounds from anywhere else (a double of any kind) are still priced, never thrown on.
    fc.assert(
      fc.property(fc.double(), fc.option(fc.double(), { nil: null }), fc.double(), (input, output, choices) => {
        const micros = estimateCallMicros(
          { inputTokens: input, maxOutputTokens: output, choices },
          MODEL,
          prices,
          1e12,
        );
        expect(Number.isSafeInteger(micros)).toBe(true);
      }),
    );
  });
});
