/**
 * Google's Gemini API through the proxy, driven by Google's own SDK (`@google/genai`): the model
 * from the path, usage from `usageMetadata` (thoughts as output and as reasoning, cached content
 * as cache reads), streams over SSE and as a JSON array, `countTokens` no step, the key forwarded
 * untouched and never logged, and the proxy's own answers in Google's error format.
 */
import { ApiError, GoogleGenAI } from '@google/genai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_REPLY, completionTokensFor, promptTokensFor } from '../support/fake-upstream.js';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';
import { captureLog } from '../support/log-capture.js';

const GOOGLE_KEY = 'AIzaSyFAKE-google-key-0123456789abcdef';
const MODEL = 'gemini-test-1';
const PRICES = {
  input_cost_per_token: 0.000001,
  output_cost_per_token: 0.000004,
  cache_read_input_cost_per_token: 0.0000001,
};
const completion = completionTokensFor(DEFAULT_REPLY);

let api: ProxyTestApi;
const log = captureLog('debug');

beforeAll(async () => {
  api = await startProxyTestApi('postgres+redis', { logger: log.logger });
  expect((await api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
});
afterAll(async () => {
  await api?.close();
});

async function runWithUrls(userId = 'gemini-user'): Promise<{ runId: string; urls: Record<string, string> }> {
  const run = await api.request('POST', '/v1/runs', { user_id: userId });
  const minted = await api.request('POST', `/v1/runs/${run.body.id}/proxy-token`);
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

function gemini(baseUrl: string, options: { apiVersion?: string; headers?: Record<string, string> } = {}) {
  return new GoogleGenAI({ apiKey: GOOGLE_KEY, httpOptions: { baseUrl, ...options } });
}

const contents = 'Say hello to the proxy.';
const sentPrompt = promptTokensFor({ contents: [{ parts: [{ text: contents }], role: 'user' }] });

describe('Gemini through the proxy', () => {
  it('generateContent: the model from the path, thoughts as output and reasoning, cached content as cache reads, priced', async () => {
    const { runId, urls } = await runWithUrls();
    expect(urls.google).toMatch(/\/proxy\/t\/rgp_[^/]+\/google$/);
    const headers = { 'x-fake-reasoning-tokens': '7', 'x-fake-cached-tokens': '2' };
    const answer = await gemini(urls.google!, { headers }).models.generateContent({ model: MODEL, contents });
    expect(answer.text).toBe(DEFAULT_REPLY);
    const sent = api.upstream.requests.at(-1)!;
    expect(sent.path).toBe(`/v1beta/models/${MODEL}:generateContent`);
    // The key went upstream as the SDK sent it.
    expect(sent.headers['x-goog-api-key']).toBe(GOOGLE_KEY);
    const [step] = await settledSteps(runId, 1);
    expect(step).toMatchObject({
      status: 'COMPLETED',
      model: MODEL,
      prompt_tokens: sentPrompt,
      completion_tokens: completion + 7,
      reasoning_tokens: 7,
      cache_read_tokens: 2,
      input_data: { provider: 'google', path: `/v1beta/models/${MODEL}:generateContent`, stream: false },
    });
    const cost =
      (sentPrompt - 2) * PRICES.input_cost_per_token +
      2 * PRICES.cache_read_input_cost_per_token +
      (completion + 7) * PRICES.output_cost_per_token;
    expect(step.cost_usd).toBeCloseTo(cost, 12);
  });

  it('streamGenerateContent over SSE (the SDK asks alt=sse), and on v1 and v1alpha alike', async () => {
    const { runId, urls } = await runWithUrls();
    let text = '';
    for await (const chunk of await gemini(urls.google!).models.generateContentStream({ model: MODEL, contents })) {
      text += chunk.text ?? '';
    }
    expect(text).toBe(DEFAULT_REPLY);
    expect(api.upstream.requests.at(-1)!.path).toBe(`/v1beta/models/${MODEL}:streamGenerateContent?alt=sse`);
    for (const apiVersion of ['v1', 'v1alpha']) {
      const answer = await gemini(urls.google!, { apiVersion }).models.generateContent({ model: MODEL, contents });
      expect(answer.text).toBe(DEFAULT_REPLY);
    }
    const steps = await settledSteps(runId, 3);
    expect(steps.map((s) => [s.status, s.model, s.input_data.path, s.input_data.stream, s.completion_tokens])).toEqual([
      ['COMPLETED', MODEL, `/v1beta/models/${MODEL}:streamGenerateContent`, true, completion],
      ['COMPLETED', MODEL, `/v1/models/${MODEL}:generateContent`, false, completion],
      ['COMPLETED', MODEL, `/v1alpha/models/${MODEL}:generateContent`, false, completion],
    ]);
    for (const step of steps) expect(step.cost_usd).toBeGreaterThan(0);
  });

  it('a stream without alt=sse (a JSON array of chunks) is priced from its last chunk; ?key= is forwarded, never logged', async () => {
    const { runId, urls } = await runWithUrls();
    const res = await fetch(`${urls.google}/v1beta/models/${MODEL}:streamGenerateContent?key=${GOOGLE_KEY}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ contents: [{ parts: [{ text: contents }], role: 'user' }] }),
    });
    expect(res.status).toBe(200);
    expect(Array.isArray(await res.json())).toBe(true);
    expect(api.upstream.requests.at(-1)!.path).toBe(`/v1beta/models/${MODEL}:streamGenerateContent?key=${GOOGLE_KEY}`);
    const [step] = await settledSteps(runId, 1);
    expect(step).toMatchObject({ status: 'COMPLETED', prompt_tokens: sentPrompt, completion_tokens: completion });
    expect(JSON.stringify(step)).not.toContain(GOOGLE_KEY);
    expect(log.lines.join('')).not.toContain(GOOGLE_KEY);
  });

  it('countTokens is forwarded and is no step', async () => {
    const { runId, urls } = await runWithUrls();
    const counted = await gemini(urls.google!).models.countTokens({ model: MODEL, contents });
    expect(counted.totalTokens).toBe(sentPrompt);
    expect(api.upstream.requests.at(-1)!.path).toBe(`/v1beta/models/${MODEL}:countTokens`);
    expect((await api.request('GET', `/v1/runs/${runId}`)).body.steps).toEqual([]);
  });

  it('a body without a model in its path is a 400 in Google format, sent nowhere', async () => {
    const { runId, urls } = await runWithUrls();
    const from = api.upstream.requests.length;
    const res = await fetch(`${urls.google}/v1beta/models:generateContent`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-goog-api-key': GOOGLE_KEY },
      body: JSON.stringify({ contents: [{ parts: [{ text: contents }] }] }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: { code: 400, status: 'INVALID_ARGUMENT', message: expect.stringContaining('names no model') },
    });
    expect(api.upstream.requests.length).toBe(from);
    expect((await api.request('GET', `/v1/runs/${runId}`)).body.steps).toEqual([]);
  });

  it("a denial reaches the SDK as Google's 403 PERMISSION_DENIED, with runguard's sentence", async () => {
    const run = await api.request('POST', '/v1/runs', { user_id: 'gemini-denied', limits: { max_steps: 1 } });
    const minted = await api.request('POST', `/v1/runs/${run.body.id}/proxy-token`);
    const client = gemini(minted.body.urls.google);
    await client.models.generateContent({ model: MODEL, contents });
    const from = api.upstream.requests.length;
    const error = await client.models.generateContent({ model: MODEL, contents }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect((error as ApiError).status).toBe(403);
    expect((error as ApiError).message).toContain('runguard denied this model call: RUN_STEP_LIMIT_EXCEEDED');
    expect((error as ApiError).message).toContain('PERMISSION_DENIED');
    expect(api.upstream.requests.length).toBe(from);
  });
});
