/**
 * Cached, cache-writing and reasoning calls priced exactly through the proxy: the official OpenAI
 * and Anthropic SDKs against the real app and a fake provider, JSON and SSE, each cost checked
 * against a hand computation.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { startTestApi, type TestApi } from '../support/harness.js';

let upstream: FakeUpstream;
let api: TestApi;

// Every call: 10,000 prompt tokens (cached ones included) and 500 completion tokens.
const PROMPT = 10_000;
const COMPLETION = 500;

beforeAll(async () => {
  upstream = await startFakeUpstream({ promptTokens: PROMPT, completionTokens: COMPLETION });
  api = await startTestApi('postgres+redis', { proxy: { upstream: upstream.url } });
  const prices: Record<string, object> = {
    // $2.50 / $10 per million, cached input $1.25, no write price of its own.
    'gpt-4o': {
      input_cost_per_token: 0.0000025,
      output_cost_per_token: 0.00001,
      cache_read_input_cost_per_token: 0.00000125,
    },
    // $5 / $30, cache reads $0.50, cache writes $6.25.
    'gpt-5.6': {
      input_cost_per_token: 0.000005,
      output_cost_per_token: 0.00003,
      cache_read_input_cost_per_token: 0.0000005,
      cache_write_input_cost_per_token: 0.00000625,
    },
    // $3 / $15, cache reads $0.30, 5-minute cache writes $3.75.
    'claude-sonnet-4-5': {
      input_cost_per_token: 0.000003,
      output_cost_per_token: 0.000015,
      cache_read_input_cost_per_token: 0.0000003,
      cache_write_input_cost_per_token: 0.00000375,
    },
  };
  for (const [model, price] of Object.entries(prices)) {
    expect((await api.request('PUT', `/v1/model-pricing/${model}`, price)).status).toBe(200);
  }
});
afterAll(async () => {
  await api?.close();
  await upstream?.close();
});

async function startRun(): Promise<string> {
  return (await api.request('POST', '/v1/runs', { user_id: 'cache-user' })).body.id;
}

/** The proxy records after the answer is delivered: wait until the step is no longer ALLOWED. */
async function settledStep(runId: string): Promise<any> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const run = (await api.request('GET', `/v1/runs/${runId}`)).body;
    if (run.steps.length === 1 && run.steps[0].status !== 'ALLOWED' && run.total_tokens > 0)
      return { run, step: run.steps[0] };
    if (Date.now() > deadline) throw new Error(`run ${runId} did not settle: ${JSON.stringify(run.steps)}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const openaiFor = (runId: string, headers: Record<string, string>) =>
  new OpenAI({
    baseURL: `${api.url}/proxy/runs/${runId}/openai/v1`,
    apiKey: 'sk-provider',
    maxRetries: 0,
    defaultHeaders: { 'x-runguard-key': api.apiKey, ...headers },
  });
const anthropicFor = (runId: string, headers: Record<string, string>) =>
  new Anthropic({
    baseURL: `${api.url}/proxy/runs/${runId}/anthropic`,
    apiKey: 'sk-ant-provider',
    maxRetries: 0,
    defaultHeaders: { 'x-runguard-key': api.apiKey, ...headers },
  });

const chat = { messages: [{ role: 'user' as const, content: 'The long shared context, again.' }] };

describe('OpenAI calls with cached input, through the proxy', () => {
  // (10,000 - 8,000) x 0.0000025 = 0.005; 8,000 x 0.00000125 = 0.01; 500 x 0.00001 = 0.005.
  const headers = { 'x-fake-cached-tokens': '8000', 'x-fake-reasoning-tokens': '200' };
  const expected = {
    status: 'COMPLETED',
    prompt_tokens: PROMPT,
    completion_tokens: COMPLETION,
    cache_read_tokens: 8_000,
    cached_prompt_tokens: 8_000,
    cache_write_tokens: 0,
    reasoning_tokens: 200,
    cost_usd: 0.02,
  };

  it('when a chat completion answers JSON, then cached tokens cost the cache-read price', async () => {
    const runId = await startRun();
    await openaiFor(runId, headers).chat.completions.create({ model: 'gpt-4o', ...chat });
    const { run, step } = await settledStep(runId);
    expect(step).toMatchObject(expected);
    expect(run.total_cost_usd).toBe(0.02);
  });

  it('when a chat completion streams, then the usage chunk prices it the same', async () => {
    const runId = await startRun();
    const stream = await openaiFor(runId, headers).chat.completions.create({ model: 'gpt-4o', ...chat, stream: true });
    for await (const chunk of stream) void chunk;
    expect((await settledStep(runId)).step).toMatchObject(expected);
  });

  it.each([false, true])(
    'when a Responses call (stream: %s) reports cached input, then it is priced the same',
    async (stream) => {
      const runId = await startRun();
      const client = openaiFor(runId, headers);
      if (stream) await client.responses.stream({ model: 'gpt-4o', input: 'The long shared context.' }).finalResponse();
      else await client.responses.create({ model: 'gpt-4o', input: 'The long shared context.' });
      expect((await settledStep(runId)).step).toMatchObject(expected);
    },
  );

  it('when a model bills cache writes, then reads, writes and plain input each cost their own price', async () => {
    // (10,000 - 4,000 - 2,000) x 0.000005 = 0.02; 4,000 x 0.0000005 = 0.002; 2,000 x 0.00000625 = 0.0125; 500 x 0.00003 = 0.015.
    const runId = await startRun();
    await openaiFor(runId, {
      'x-fake-cached-tokens': '4000',
      'x-fake-cache-write-tokens': '2000',
    }).chat.completions.create({ model: 'gpt-5.6', ...chat });
    expect((await settledStep(runId)).step).toMatchObject({
      cache_read_tokens: 4_000,
      cache_write_tokens: 2_000,
      cost_usd: 0.0495,
    });
  });
});

describe('Anthropic calls with cache reads and writes, through the proxy', () => {
  // input_tokens 1,000 x 0.000003 = 0.003; reads 6,000 x 0.0000003 = 0.0018;
  // writes 3,000 x 0.00000375 = 0.01125; output 500 x 0.000015 = 0.0075. Sum: 0.02355.
  const headers = {
    'x-fake-cached-tokens': '6000',
    'x-fake-cache-write-tokens': '3000',
    'x-fake-reasoning-tokens': '120',
  };
  const expected = {
    status: 'COMPLETED',
    prompt_tokens: PROMPT,
    completion_tokens: COMPLETION,
    cache_read_tokens: 6_000,
    cache_write_tokens: 3_000,
    reasoning_tokens: 120,
    cost_usd: 0.02355,
  };
  const message = {
    model: 'claude-sonnet-4-5',
    max_tokens: 1024,
    messages: [{ role: 'user' as const, content: 'The long shared context.' }],
  };

  it("when a message answers JSON, then Anthropic's input_tokens are the uncached part and each part has its price", async () => {
    const runId = await startRun();
    const answer = await anthropicFor(runId, headers).messages.create(message);
    expect(answer.usage).toMatchObject({
      input_tokens: 1_000,
      cache_read_input_tokens: 6_000,
      cache_creation_input_tokens: 3_000,
    });
    expect((await settledStep(runId)).step).toMatchObject(expected);
  });

  it('when a message streams, then message_start and message_delta price it the same', async () => {
    const runId = await startRun();
    await anthropicFor(runId, headers).messages.stream(message).finalMessage();
    expect((await settledStep(runId)).step).toMatchObject(expected);
  });

  it("when the day's spend is read, then it holds each call rounded to the microdollar", async () => {
    const usage = (await api.request('GET', '/v1/usage')).body;
    // 4 x 0.02 + 0.0495 + 2 x 0.02355 = 0.1766, every cost a whole number of microdollars.
    expect(usage.workspace_daily_spend_usd).toBe(0.1766);
  });
});
