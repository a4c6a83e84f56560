/**
 * What reaches the proxy besides model calls, and the base-URL conventions clients follow: a GET
 * of a listing, a connectivity check, a token count are forwarded but are no step; an upgrade the
 * proxy does not relay is refused (426) before anything goes upstream; a path without the API's
 * `/v1` (the Vercel AI SDK's `<base>/messages`) reaches the same endpoint as one with it.
 */
import { createAnthropic } from '@ai-sdk/anthropic';
import { generateText } from 'ai';
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_REPLY } from '../support/fake-upstream.js';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

let api: ProxyTestApi;

beforeAll(async () => {
  api = await startProxyTestApi('postgres+redis');
  const prices = { input_cost_per_token: 0.000001, output_cost_per_token: 0.000004 };
  for (const model of ['gpt-4o-mini', 'claude-test-1']) {
    expect((await api.request('PUT', `/v1/model-pricing/${model}`, prices)).status).toBe(200);
  }
});
afterAll(async () => {
  await api?.close();
});

/** A RUNNING run and the base URLs `runguard exec` would hand its command. */
async function runWithUrls(): Promise<{ runId: string; urls: Record<string, string> }> {
  const run = await api.request('POST', '/v1/runs', { user_id: 'conventions' });
  const minted = await api.request('POST', `/v1/runs/${run.body.id}/proxy-token`);
  expect(minted.status).toBe(201);
  return { runId: run.body.id, urls: minted.body.urls };
}

async function settledSteps(runId: string, count: number): Promise<any[]> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const { steps } = (await api.request('GET', `/v1/runs/${runId}`)).body;
    if (steps.length >= count && steps.every((s: any) => s.status !== 'ALLOWED')) return steps;
    if (Date.now() > deadline) throw new Error(`run ${runId} did not settle: ${JSON.stringify(steps)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A request with `Upgrade: websocket`, as a WebSocket client opens (fetch may not send it). */
function upgradeRequest(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, {
      headers: {
        connection: 'Upgrade',
        upgrade: 'websocket',
        'sec-websocket-version': '13',
        'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
      },
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('upgrade', () => reject(new Error('the proxy switched protocols')));
    req.on('error', reject);
    req.end();
  });
}

describe('requests that are not model calls', () => {
  it('a GET of a listing, a HEAD check and a token count are forwarded, and are no step', async () => {
    const { runId, urls } = await runWithUrls();
    const from = api.upstream.requests.length;
    const models = await fetch(`${urls.openai}/models`, { headers: { authorization: 'Bearer sk-own' } });
    await models.arrayBuffer();
    const hello = await fetch(`${urls.anthropic}/api/hello`, { method: 'HEAD' });
    const count = await fetch(`${urls.anthropic}/v1/messages/count_tokens`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'sk-ant-own' },
      body: JSON.stringify({ model: 'claude-test-1', messages: [{ role: 'user', content: 'hi' }] }),
    });
    await count.arrayBuffer();
    // The fake provider has no such routes: its 404s came back as they were.
    expect([models.status, hello.status, count.status]).toEqual([404, 404, 404]);
    expect(api.upstream.requests.slice(from).map((r) => [r.method, r.path, r.headers.authorization])).toEqual([
      ['GET', '/v1/models', 'Bearer sk-own'],
      ['HEAD', '/api/hello', undefined],
      ['POST', '/v1/messages/count_tokens', undefined],
    ]);
    // A model call after them is the run's first step.
    const res = await fetch(`${urls.openai}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const steps = await settledSteps(runId, 1);
    expect(steps.map((s) => [s.sequence, s.status, s.input_data.path])).toEqual([
      [1, 'COMPLETED', '/v1/chat/completions'],
    ]);
  });

  it('an upgrade the proxy does not relay is refused with 426 in the provider format, nothing sent upstream', async () => {
    const { runId, urls } = await runWithUrls();
    const from = api.upstream.requests.length;
    const answer = await upgradeRequest(`${urls.openai}/chat/completions`);
    expect(answer.status).toBe(426);
    expect(JSON.parse(answer.body)).toMatchObject({ error: { code: 'UPGRADE_NOT_RELAYED' } });
    expect(api.upstream.requests.length).toBe(from);
    expect((await api.request('GET', `/v1/runs/${runId}`)).body.steps).toEqual([]);
  });

  it("a run's token forwards nothing once the run ended, not even a GET", async () => {
    const { runId, urls } = await runWithUrls();
    expect((await api.request('POST', `/v1/runs/${runId}/end`, { status: 'COMPLETED' })).status).toBe(200);
    const from = api.upstream.requests.length;
    const res = await fetch(`${urls.openai}/models`);
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ error: { code: 'UNAUTHORIZED' } });
    expect(api.upstream.requests.length).toBe(from);
  });
});

describe('both base-URL conventions of each provider', () => {
  it('the Vercel AI SDK, reading ANTHROPIC_BASE_URL as a base that ends in /v1, reaches /v1/messages', async () => {
    const { runId, urls } = await runWithUrls();
    const saved = process.env.ANTHROPIC_BASE_URL;
    process.env.ANTHROPIC_BASE_URL = urls.anthropic;
    try {
      const anthropic = createAnthropic({ apiKey: 'sk-ant-own' });
      const { text } = await generateText({
        model: anthropic('claude-test-1'),
        prompt: 'hi',
        maxOutputTokens: 64,
        maxRetries: 0,
      });
      expect(text).toBe(DEFAULT_REPLY);
    } finally {
      if (saved === undefined) delete process.env.ANTHROPIC_BASE_URL;
      else process.env.ANTHROPIC_BASE_URL = saved;
    }
    expect(api.upstream.requests.at(-1)!.path).toBe('/v1/messages');
    const [step] = await settledSteps(runId, 1);
    expect(step).toMatchObject({ status: 'COMPLETED', model: 'claude-test-1', input_data: { path: '/v1/messages' } });
    expect(step.cost_usd).toBeGreaterThan(0);
  });

  it('an OpenAI base without /v1 reaches /v1/chat/completions', async () => {
    const { runId, urls } = await runWithUrls();
    const base = urls.openai!.replace(/\/v1$/, '');
    const res = await fetch(`${base}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    expect((await res.json()).choices[0].message.content).toBe(DEFAULT_REPLY);
    expect(api.upstream.requests.at(-1)!.path).toBe('/v1/chat/completions');
    const [step] = await settledSteps(runId, 1);
    expect(step).toMatchObject({ status: 'COMPLETED', input_data: { path: '/v1/chat/completions' } });
    expect(step.cost_usd).toBeGreaterThan(0);
  });
});
