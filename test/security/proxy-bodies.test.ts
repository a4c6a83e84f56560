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
import { startMcpServer, type McpFixture } from '../support/mcp-fixture.js';

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

/** Waits until no step of the workspace is unfinished (every result written), then its day's spend. */
async function settledSpendMicros(workspaceId: string): Promise<number> {
  for (const deadline = Date.now() + 20_000; ;) {
    const { rows } = await api.stores.db.query<{ open: string | number }>(
      "SELECT count(*) AS open FROM steps WHERE workspace_id = $1 AND status = 'ALLOWED'",
      [workspaceId],
    );
    if (Number(rows[0]!.open) === 0) break;
    if (Date.now() > deadline) throw new Error('steps did not settle');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const { rows } = await api.stores.db.query<{ spend: string | number | null }>(
    'SELECT sum(spend_micros) AS spend FROM usage_daily WHERE workspace_id = $1',
    [workspaceId],
  );
  return Number(rows[0]!.spend ?? 0);
}

/** A workspace of its own, its model priced at $100 and $400 per million tokens: ~4,000 microdollars a call. */
async function pricedWorkspace(settings: Record<string, unknown>, model = MODEL) {
  const ws = await api.newWorkspace('scale');
  const prices = { input_cost_per_token: 0.0001, output_cost_per_token: 0.0004 };
  expect((await ws.api.request('PUT', `/v1/model-pricing/${model}`, prices)).status).toBe(200);
  expect((await ws.api.request('PATCH', '/v1/workspace', settings)).status).toBe(200);
  return ws;
}

const chatText = JSON.stringify({
  model: MODEL,
  max_tokens: 20,
  messages: [{ role: 'user', content: 'Spend it all.' }],
});

/** `depth` nested arrays around `inner`. */
const nested = (depth: number, inner = '1') => '['.repeat(depth) + inner + ']'.repeat(depth);

describe('a body read whatever its content type', () => {
  it('when calls are sent as text/plain, then they are priced and the daily budget stops them', async () => {
    const ws = await pricedWorkspace({ daily_budget_usd: 0.01 });
    const statuses: number[] = [];
    for (let i = 0; i < 12 && statuses.at(-1) !== 403; i++) {
      const res = await proxied('openai/v1/chat/completions', chatText, { 'content-type': 'text/plain' }, ws.apiKey);
      statuses.push(res.status);
      if (res.status === 403) expect(res.body.error.code).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
      await settledSpendMicros(ws.workspaceId);
    }
    // About 4,000 microdollars a call against a budget of 10,000: the third call passes it.
    expect(statuses).toEqual([200, 200, 200, 403]);
    expect(await settledSpendMicros(ws.workspaceId)).toBeGreaterThanOrEqual(10_000);
    const { rows } = await api.stores.db.query<{ model: string | null; cost_usd: string | null }>(
      "SELECT model, cost_usd FROM steps WHERE workspace_id = $1 AND status = 'COMPLETED'",
      [ws.workspaceId],
    );
    expect(rows).toHaveLength(3);
    for (const row of rows) expect(row).toMatchObject({ model: MODEL, cost_usd: expect.any(String) });
  });

  it('when reserve mode meets a text/plain call, then it is refused as the same call in JSON is', async () => {
    // The estimate of this call (its bytes and 20 output tokens) is past a $0.005 budget.
    const ws = await pricedWorkspace({ daily_budget_usd: 0.005, budget_mode: 'reserve' });
    const before = api.upstream.requests.length;
    for (const contentType of ['application/json', 'text/plain', 'application/x-www-form-urlencoded']) {
      const res = await proxied('openai/v1/chat/completions', chatText, { 'content-type': contentType }, ws.apiKey);
      expect(res.status, contentType).toBe(403);
      expect(res.body.error.code, contentType).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    }
    expect(api.upstream.requests.length).toBe(before);
  });

  it('when a model call’s body is not a JSON object, then 400 in the provider’s format, never forwarded', async () => {
    const before = api.upstream.requests.length;
    const cases: [string, string, string][] = [
      ['openai/v1/chat/completions', 'model=gpt-4o-mini&messages=hi', 'application/x-www-form-urlencoded'],
      ['openai/v1/responses', '{"model": "gpt-4o-mini", "input": "cut', 'text/plain'],
      ['openai/v1/embeddings', '["gpt-4o-mini"]', 'application/json'],
      ['anthropic/v1/messages', 'not json at all', 'text/plain'],
    ];
    for (const [path, body, contentType] of cases) {
      const res = await proxied(path, body, { 'content-type': contentType });
      expect(res.status, path).toBe(400);
      expect(res.body.error.message, path).toMatch(/must be a JSON object/);
      if (path.startsWith('anthropic')) expect(res.body).toMatchObject({ type: 'error' });
      else expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'INVALID_JSON' });
    }
    expect(api.upstream.requests.length).toBe(before);
  });

  it('when a request names no model, then the model its answer names prices the step', async () => {
    // The fake upstream answers a request without a model as "fake-model".
    const ws = await pricedWorkspace({}, 'fake-model');
    const res = await proxied('openai/v1/chat/completions', JSON.stringify({ messages: [] }), {}, ws.apiKey);
    expect(res.status).toBe(200);
    expect(res.body.model).toBe('fake-model');
    expect(await settledSpendMicros(ws.workspaceId)).toBeGreaterThan(0);
    const stream = await proxied(
      'anthropic/v1/messages',
      JSON.stringify({ max_tokens: 10, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      { 'content-type': 'text/plain' },
      ws.apiKey,
    );
    expect(stream.status).toBe(200);
    await settledSpendMicros(ws.workspaceId);
    const { rows } = await api.stores.db.query<{ model: string | null; cost_usd: string | null }>(
      'SELECT model, cost_usd FROM steps WHERE workspace_id = $1',
      [ws.workspaceId],
    );
    expect(rows).toHaveLength(2);
    for (const row of rows) expect(row).toMatchObject({ model: 'fake-model', cost_usd: expect.any(String) });
  });
});

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

describe('hostile bodies on the MCP proxy', () => {
  let mcp: McpFixture;
  beforeAll(async () => {
    mcp = await startMcpServer({ json: true });
    expect((await api.request('POST', '/v1/mcp/servers', { name: 'fx', url: mcp.url })).status).toBe(201);
  });
  afterAll(async () => {
    await mcp?.close();
  });

  it('when a tools/call nests its arguments 2,400 levels deep in a run with max_identical_calls, then a JSON-RPC refusal, not a 500', async () => {
    const runId = await startRun({ max_identical_calls: 3 });
    const body = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":${nested(2_400, '"deep"')}}}}`;
    const res = await fetch(`${api.url}/proxy/runs/${runId}/mcp/fx`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'x-runguard-key': api.apiKey,
      },
      body,
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ jsonrpc: '2.0', error: { message: expect.stringMatching(/128 levels/) } });
    expect((await mcp.calls()).filter((call) => call.name === 'echo')).toEqual([]);
  });
});
