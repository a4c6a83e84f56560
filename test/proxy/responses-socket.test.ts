/**
 * The Responses API over WebSocket through the proxy, with a real WebSocket client (`ws`) and a
 * fake provider's own WebSocket: each `response.create` a step decided before it goes upstream
 * and priced from its `response.completed`; a denial an `error` event, nothing upstream; the
 * socket bounded (message size 1009, non-JSON 1007, idle time, credentials before connecting).
 * And with the OpenAI Agents SDK's own WebSocket model (`OpenAIResponsesWSModel`).
 */
import { Agent, OpenAIProvider, OpenAIResponsesWSModel, run, setTracingDisabled } from '@openai/agents';
import { WebSocket as StandardWebSocket } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { completionTokensFor, DEFAULT_REPLY, promptTokensFor } from '../support/fake-upstream.js';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

const MODEL = 'gpt-4o-mini';
const PRICES = { input_cost_per_token: 0.000001, output_cost_per_token: 0.000004 };
const IDLE_MS = 1_500;

let api: ProxyTestApi;

beforeAll(async () => {
  // The Agents SDK opens its socket with the runtime's WebSocket (global from Node 22 on) and
  // exports traces to OpenAI unless told not to.
  (globalThis as { WebSocket?: unknown }).WebSocket ??= StandardWebSocket;
  setTracingDisabled(true);
  api = await startProxyTestApi('postgres+redis', { proxy: { bodyLimitBytes: 64 * 1024, webSocketIdleMs: IDLE_MS } });
  expect((await api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
});
afterAll(async () => {
  await api?.close();
});

async function runUrl(limits?: Record<string, number>): Promise<{ runId: string; url: string }> {
  const run = await api.request('POST', '/v1/runs', { user_id: 'ws-user', ...(limits && { limits }) });
  const minted = await api.request('POST', `/v1/runs/${run.body.id}/proxy-token`);
  return { runId: run.body.id, url: `${minted.body.urls.openai.replace(/^http/, 'ws')}/responses` };
}

/** An open socket and every message it received, parsed. */
async function connect(url: string): Promise<{ ws: WebSocket; events: any[]; closed: Promise<number> }> {
  const ws = new WebSocket(url, { headers: { authorization: 'Bearer sk-own' } });
  const events: any[] = [];
  ws.on('message', (data) => events.push(JSON.parse(String(data))));
  const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return { ws, events, closed };
}

async function until<T>(read: () => T | undefined, what: string): Promise<T> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const value = read();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function stepsOf(runId: string, count: number): Promise<any[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const { steps } = (await api.request('GET', `/v1/runs/${runId}`)).body;
    if (steps.length >= count && steps.every((s: any) => s.status !== 'ALLOWED')) return steps;
    if (Date.now() > deadline) throw new Error(`run ${runId} did not settle: ${JSON.stringify(steps)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const create = (text: string) => ({ type: 'response.create', model: MODEL, input: text });
const completedCount = (events: any[]) => events.filter((e) => e.type === 'response.completed').length;

describe('the Responses API over WebSocket', () => {
  it('relays both ways; each response.create is a step priced from its response.completed', async () => {
    const { runId, url } = await runUrl();
    const sockets = api.upstream.sockets.length;
    const { ws, events } = await connect(url);
    ws.send(JSON.stringify(create('first question')));
    await until(() => (completedCount(events) === 1 ? true : undefined), 'the first answer');
    ws.send(JSON.stringify({ type: 'response.cancel' }));
    ws.send(JSON.stringify(create('second question')));
    await until(() => (completedCount(events) === 2 ? true : undefined), 'the second answer');
    ws.close();
    // One agent socket, one provider socket, carrying the agent's events as they were.
    expect(api.upstream.sockets.length).toBe(sockets + 1);
    const upstream = api.upstream.sockets.at(-1)!;
    expect(upstream.path).toBe('/v1/responses');
    expect(upstream.headers.authorization).toBe('Bearer sk-own');
    expect(upstream.messages.map((m: any) => m.type)).toEqual([
      'response.create',
      'response.cancel',
      'response.create',
    ]);
    expect(events.filter((e) => e.type === 'response.output_text.done').map((e) => e.text)).toEqual([
      DEFAULT_REPLY,
      DEFAULT_REPLY,
    ]);
    const steps = await stepsOf(runId, 2);
    const prompt = promptTokensFor({ input: 'first question' });
    expect(steps.map((s) => [s.status, s.model, s.input_data.path])).toEqual([
      ['COMPLETED', MODEL, '/v1/responses'],
      ['COMPLETED', MODEL, '/v1/responses'],
    ]);
    expect(steps[0]).toMatchObject({ prompt_tokens: prompt, completion_tokens: completionTokensFor(DEFAULT_REPLY) });
    expect(steps[0].cost_usd).toBeCloseTo(
      prompt * PRICES.input_cost_per_token + completionTokensFor(DEFAULT_REPLY) * PRICES.output_cost_per_token,
      12,
    );
  });

  it('a denied response.create is an error event in the provider shape, and nothing goes upstream', async () => {
    const { runId, url } = await runUrl({ max_steps: 1 });
    const { ws, events } = await connect(url);
    ws.send(JSON.stringify(create('allowed')));
    await until(() => (completedCount(events) === 1 ? true : undefined), 'the answer');
    ws.send(JSON.stringify(create('denied')));
    const error = await until(() => events.find((e) => e.type === 'error'), 'the error event');
    expect(error).toMatchObject({
      type: 'error',
      status: 403,
      error: {
        code: 'RUN_STEP_LIMIT_EXCEEDED',
        message: expect.stringContaining('runguard denied this model call: RUN_STEP_LIMIT_EXCEEDED'),
      },
    });
    ws.close();
    const upstream = api.upstream.sockets.at(-1)!;
    expect(upstream.messages.map((m: any) => m.input)).toEqual(['allowed']);
    const steps = await stepsOf(runId, 2);
    expect(steps.map((s) => [s.status, s.decision.reason])).toEqual([
      ['COMPLETED', null],
      ['BLOCKED', 'RUN_STEP_LIMIT_EXCEEDED'],
    ]);
  });

  it('an upgrade without a valid credential, or from a web page, is refused before any upstream connection', async () => {
    const sockets = api.upstream.sockets.length;
    const ws = new WebSocket(`${api.url.replace(/^http/, 'ws')}/proxy/t/rgp_${'x'.repeat(43)}/openai/v1/responses`);
    const status = await new Promise<number>((resolve, reject) => {
      ws.once('unexpected-response', (_req, res) => resolve(res.statusCode!));
      ws.once('open', () => reject(new Error('opened')));
    });
    expect(status).toBe(401);
    const runless = new WebSocket(`${api.url.replace(/^http/, 'ws')}/proxy/openai/v1/responses`);
    const second = await new Promise<number>((resolve, reject) => {
      runless.once('unexpected-response', (_req, res) => resolve(res.statusCode!));
      runless.once('open', () => reject(new Error('opened')));
    });
    expect(second).toBe(401);
    // A web page's socket (browsers always send Origin) is refused even with a valid token.
    const { url } = await runUrl();
    const fromPage = new WebSocket(url, { origin: 'https://evil.example' });
    const third = await new Promise<number>((resolve, reject) => {
      fromPage.once('unexpected-response', (_req, res) => resolve(res.statusCode!));
      fromPage.once('open', () => reject(new Error('opened')));
    });
    expect(third).toBe(403);
    expect(api.upstream.sockets.length).toBe(sockets);
  });

  it('a message over the bound gets an error event and 1009; one that is not JSON, 1007', async () => {
    const { url } = await runUrl();
    const big = await connect(url);
    big.ws.send(JSON.stringify(create('x'.repeat(100 * 1024))));
    expect(await big.closed).toBe(1009);
    expect(big.events).toMatchObject([{ type: 'error', status: 413, error: { code: 'PAYLOAD_TOO_LARGE' } }]);

    const garbled = await connect(url);
    garbled.ws.send('not json');
    expect(await garbled.closed).toBe(1007);
    expect(garbled.events).toMatchObject([{ type: 'error', status: 400, error: { code: 'INVALID_JSON' } }]);
  });

  it('a socket silent both ways is closed once its idle time is up', async () => {
    const { url } = await runUrl();
    const { closed } = await connect(url);
    expect(await closed).toBe(1001);
  });

  it("the Agents SDK's OpenAIResponsesWSModel runs an agent through it, and a denial ends its next run", async () => {
    const { runId, url } = await runUrl({ max_steps: 1 });
    const baseURL = url.replace(/^ws/, 'http').replace(/\/responses$/, '');
    const provider = new OpenAIProvider({ apiKey: 'sk-own', baseURL, useResponses: true, useResponsesWebSocket: true });
    const model = await provider.getModel(MODEL);
    expect(model).toBeInstanceOf(OpenAIResponsesWSModel);
    const agent = new Agent({ name: 'greeter', instructions: 'Greet the user.', model });
    try {
      const result = await run(agent, 'Say hello.');
      expect(result.finalOutput).toBe(DEFAULT_REPLY);
      const denied = await run(agent, 'Say hello again.').catch((error: unknown) => error);
      // The SDK reads our `error` event as the provider's and ends the run with it: the model's
      // user sees the reason and the numbers.
      expect(denied).toBeInstanceOf(Error);
      expect((denied as Error).message).toContain('"code":"RUN_STEP_LIMIT_EXCEEDED"');
      expect((denied as Error).message).toContain('run step limit reached: 1 of 1 steps');
    } finally {
      await provider.close();
    }
    const steps = await stepsOf(runId, 2);
    expect(steps.map((s) => [s.status, s.model, s.decision.reason])).toEqual([
      ['COMPLETED', MODEL, null],
      ['BLOCKED', MODEL, 'RUN_STEP_LIMIT_EXCEEDED'],
    ]);
    expect(api.upstream.sockets.at(-1)!.messages.filter((m: any) => m.type === 'response.create')).toHaveLength(1);
  });
});
