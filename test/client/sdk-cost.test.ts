/**
 * Exact cost through the SDK: `run.modelCall` around the official OpenAI and Anthropic SDKs
 * against a fake provider, recorded by the real daemon, each cost against a hand computation.
 * Streams, too: the chunks reach the caller untouched; the step is reported when the stream ends,
 * priced like any other call, or FAILED with the usage so far when it breaks or its reader stops early.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { Stream } from 'openai/streaming';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { extractors, GuardClient, type Run } from '../../clients/typescript/src/index.js';
import { DEFAULT_REPLY, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { startTestApi, type TestApi } from '../support/harness.js';

let daemon: TestApi;
let upstream: FakeUpstream;
let guard: GuardClient;

// Every call: 10,000 prompt tokens (cached ones included) and 500 completion tokens.
beforeAll(async () => {
  [daemon, upstream] = await Promise.all([
    startTestApi('postgres+redis'),
    startFakeUpstream({ promptTokens: 10_000, completionTokens: 500 }),
  ]);
  guard = new GuardClient({ apiKey: daemon.apiKey, baseUrl: daemon.url });
  await daemon.request('PUT', '/v1/model-pricing/gpt-4o', {
    input_cost_per_token: 0.0000025,
    output_cost_per_token: 0.00001,
    cache_read_input_cost_per_token: 0.00000125,
  });
  await daemon.request('PUT', '/v1/model-pricing/claude-sonnet-4-5', {
    input_cost_per_token: 0.000003,
    output_cost_per_token: 0.000015,
    cache_read_input_cost_per_token: 0.0000003,
    cache_write_input_cost_per_token: 0.00000375,
  });
});
afterAll(async () => {
  await guard?.close();
  await Promise.all([daemon?.close(), upstream?.close()]);
});

const openai = (headers: Record<string, string> = {}) =>
  new OpenAI({ baseURL: `${upstream.url}/v1`, apiKey: 'sk-test', maxRetries: 0, defaultHeaders: headers });
const anthropic = (headers: Record<string, string> = {}) =>
  new Anthropic({ baseURL: upstream.url, apiKey: 'sk-ant-test', maxRetries: 0, defaultHeaders: headers });

const OPENAI_CACHE = { 'x-fake-cached-tokens': '8000', 'x-fake-reasoning-tokens': '200' };
// (10,000 - 8,000) x 0.0000025 + 8,000 x 0.00000125 + 500 x 0.00001 = 0.005 + 0.01 + 0.005.
const OPENAI_STEP = {
  status: 'COMPLETED',
  prompt_tokens: 10_000,
  completion_tokens: 500,
  cache_read_tokens: 8_000,
  reasoning_tokens: 200,
  cost_usd: 0.02,
};
const ANTHROPIC_CACHE = { 'x-fake-cached-tokens': '6000', 'x-fake-cache-write-tokens': '3000' };
// 1,000 x 0.000003 + 6,000 x 0.0000003 + 3,000 x 0.00000375 + 500 x 0.000015 = 0.003 + 0.0018 + 0.01125 + 0.0075.
const ANTHROPIC_STEP = {
  status: 'COMPLETED',
  prompt_tokens: 10_000,
  completion_tokens: 500,
  cache_read_tokens: 6_000,
  cache_write_tokens: 3_000,
  cost_usd: 0.02355,
};
const message = {
  model: 'claude-sonnet-4-5',
  max_tokens: 1024,
  messages: [{ role: 'user' as const, content: 'The long shared context.' }],
};

/** Runs `fn` in a guarded run; answers the run as the daemon recorded it. */
async function recorded(fn: Parameters<GuardClient['run']>[1]): Promise<Run> {
  let runId = '';
  await guard.run('stream-user', async (run) => {
    runId = run.id;
    return fn(run);
  });
  return (await daemon.request<Run>('GET', `/v1/runs/${runId}`)).body;
}

describe('cached and reasoning calls through the SDK, JSON', () => {
  it('when an OpenAI chat completion has cached input and reasoning, then its extractor prices it exactly', async () => {
    const run = await recorded((r) =>
      r.modelCall(
        () =>
          openai(OPENAI_CACHE).chat.completions.create({
            model: 'gpt-4o',
            messages: [{ role: 'user', content: 'hi' }],
          }),
        { model: 'gpt-4o', tokenExtractor: extractors.openai },
      ),
    );
    expect(run.steps[0]).toMatchObject(OPENAI_STEP);
  });

  it('when a Responses call has cached input, then it is priced the same', async () => {
    const run = await recorded((r) =>
      r.modelCall(() => openai(OPENAI_CACHE).responses.create({ model: 'gpt-4o', input: 'hi' }), {
        model: 'gpt-4o',
        tokenExtractor: extractors.openaiResponses,
      }),
    );
    expect(run.steps[0]).toMatchObject(OPENAI_STEP);
  });

  it('when an Anthropic message reads and writes the cache, then prompt tokens are all input and each part has its price', async () => {
    const run = await recorded((r) =>
      r.modelCall(() => anthropic(ANTHROPIC_CACHE).messages.create(message), {
        model: 'claude-sonnet-4-5',
        tokenExtractor: extractors.anthropic,
      }),
    );
    expect(run.steps[0]).toMatchObject(ANTHROPIC_STEP);
  });
});

describe('streams through the SDK, read to their end', () => {
  it('when an OpenAI chat stream is read, then its chunks pass untouched and the usage chunk prices the step', async () => {
    const chunks: unknown[] = [];
    let returned: unknown;
    const run = await recorded(async (r) => {
      const stream = await r.modelCall(
        () =>
          openai(OPENAI_CACHE).chat.completions.create({
            model: 'gpt-4o',
            messages: [{ role: 'user', content: 'hi' }],
            stream: true,
            stream_options: { include_usage: true },
          }),
        { model: 'gpt-4o', tokenExtractor: extractors.openai },
      );
      returned = stream;
      for await (const chunk of stream) chunks.push(chunk);
    });
    expect(returned).toBeInstanceOf(Stream);
    expect(chunks.map((c: any) => c.choices[0]?.delta.content ?? '').join('')).toBe(DEFAULT_REPLY);
    expect(chunks.at(-1)).toMatchObject({
      choices: [],
      usage: { prompt_tokens: 10_000, prompt_tokens_details: { cached_tokens: 8_000 } },
    });
    expect(run.steps[0]).toMatchObject(OPENAI_STEP);
    expect(run.total_cost_usd).toBe(0.02);
  });

  it('when an OpenAI stream runner (chat.completions.stream) is awaited, then the step is priced from its chunks', async () => {
    const run = await recorded(async (r) => {
      const runner = await r.modelCall(
        () =>
          openai(OPENAI_CACHE).chat.completions.stream({
            model: 'gpt-4o',
            messages: [{ role: 'user', content: 'hi' }],
            stream_options: { include_usage: true },
          }),
        { model: 'gpt-4o', tokenExtractor: extractors.openai },
      );
      expect((await runner.finalChatCompletion()).choices[0]?.message.content).toBe(DEFAULT_REPLY);
    });
    expect(run.steps[0]).toMatchObject(OPENAI_STEP);
  });

  it.each(['create', 'stream'] as const)(
    'when a Responses stream (responses.%s) ends, then response.completed prices the step',
    async (how) => {
      const run = await recorded(async (r) => {
        if (how === 'create') {
          const stream = await r.modelCall(
            () => openai(OPENAI_CACHE).responses.create({ model: 'gpt-4o', input: 'hi', stream: true }),
            { model: 'gpt-4o', tokenExtractor: extractors.openaiResponses },
          );
          for await (const event of stream) void event;
        } else {
          const runner = await r.modelCall(
            () => openai(OPENAI_CACHE).responses.stream({ model: 'gpt-4o', input: 'hi' }),
            { model: 'gpt-4o', tokenExtractor: extractors.openaiResponses },
          );
          expect((await runner.finalResponse()).output_text).toBe(DEFAULT_REPLY);
        }
      });
      expect(run.steps[0]).toMatchObject(OPENAI_STEP);
    },
  );

  it('when an Anthropic stream (create, stream: true) is read, then message_start and message_delta price the step', async () => {
    let text = '';
    const run = await recorded(async (r) => {
      const stream = await r.modelCall(() => anthropic(ANTHROPIC_CACHE).messages.create({ ...message, stream: true }), {
        model: 'claude-sonnet-4-5',
        tokenExtractor: extractors.anthropic,
      });
      for await (const event of stream)
        if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
    });
    expect(text).toBe(DEFAULT_REPLY);
    expect(run.steps[0]).toMatchObject(ANTHROPIC_STEP);
  });

  it('when an Anthropic MessageStream is awaited, not iterated, then the step is still priced when it ends', async () => {
    const run = await recorded(async (r) => {
      const stream = await r.modelCall(() => anthropic(ANTHROPIC_CACHE).messages.stream(message), {
        model: 'claude-sonnet-4-5',
        tokenExtractor: extractors.anthropic,
      });
      expect((await stream.finalMessage()).usage).toMatchObject({
        input_tokens: 1_000,
        cache_read_input_tokens: 6_000,
      });
    });
    expect(run.steps[0]).toMatchObject(ANTHROPIC_STEP);
  });

  it('when any async iterable of chunks is returned, then it is watched the same way', async () => {
    async function* chunks() {
      yield { object: 'chat.completion.chunk', choices: [{ delta: { content: 'Hi' } }], usage: null };
      yield {
        object: 'chat.completion.chunk',
        choices: [],
        usage: {
          prompt_tokens: 10_000,
          completion_tokens: 500,
          prompt_tokens_details: { cached_tokens: 8_000 },
          completion_tokens_details: { reasoning_tokens: 200 },
        },
      };
    }
    const seen: unknown[] = [];
    const run = await recorded(async (r) => {
      for await (const chunk of await r.modelCall(() => chunks(), {
        model: 'gpt-4o',
        tokenExtractor: extractors.openai,
      }))
        seen.push(chunk);
    });
    expect(seen).toHaveLength(2);
    expect(run.steps[0]).toMatchObject(OPENAI_STEP);
  });
});

describe('streams through the SDK that end early', () => {
  it('when the reader stops early, then the step is FAILED with the usage so far', async () => {
    const run = await recorded(async (r) => {
      const stream = await r.modelCall(() => anthropic(ANTHROPIC_CACHE).messages.create({ ...message, stream: true }), {
        model: 'claude-sonnet-4-5',
        tokenExtractor: extractors.anthropic,
      });
      for await (const event of stream) if (event.type === 'content_block_start') break;
    });
    // message_start said: 10,000 input tokens (1,000 + 6,000 read + 3,000 written), 1 output token so far.
    expect(run.steps[0]).toMatchObject({
      status: 'FAILED',
      prompt_tokens: 10_000,
      completion_tokens: 1,
      cache_read_tokens: 6_000,
      cache_write_tokens: 3_000,
      cost_usd: 0.016065,
      output_data: { stream: true, error: 'CONSUMER_STOPPED' },
    });
  });

  it("when the upstream breaks mid-stream, then the caller gets the SDK's error and the step is FAILED with the usage so far", async () => {
    let caught: unknown;
    const run = await recorded(async (r) => {
      const stream = await r.modelCall(
        () =>
          anthropic({ ...ANTHROPIC_CACHE, 'x-fake-abort-after-events': '3' }).messages.create({
            ...message,
            stream: true,
          }),
        { model: 'claude-sonnet-4-5', tokenExtractor: extractors.anthropic },
      );
      try {
        for await (const event of stream) void event;
      } catch (error) {
        caught = error;
      }
    });
    expect(caught).toBeInstanceOf(Error);
    expect(run.steps[0]).toMatchObject({
      status: 'FAILED',
      prompt_tokens: 10_000,
      completion_tokens: 1,
      output_data: { stream: true, error: 'STREAM_ERROR' },
    });
  });

  it("when a stream is never read, then the run's end reports it FAILED", async () => {
    const run = await recorded(async (r) => {
      await r.modelCall(
        () =>
          openai().chat.completions.create({
            model: 'gpt-4o',
            messages: [{ role: 'user', content: 'hi' }],
            stream: true,
          }),
        { model: 'gpt-4o', tokenExtractor: extractors.openai },
      );
    });
    expect(run.status).toBe('COMPLETED');
    expect(run.steps[0]).toMatchObject({
      status: 'FAILED',
      prompt_tokens: null,
      cost_usd: null,
      output_data: { stream: true, error: 'NOT_CONSUMED' },
    });
  });

  it('when an OpenAI stream is aborted through its controller, then the step is FAILED, not a complete answer', async () => {
    const run = await recorded(async (r) => {
      const stream = await r.modelCall(
        () =>
          openai({ 'x-fake-chunk-delay-ms': '20' }).chat.completions.create({
            model: 'gpt-4o',
            messages: [{ role: 'user', content: 'hi' }],
            stream: true,
          }),
        { model: 'gpt-4o', tokenExtractor: extractors.openai },
      );
      for await (const chunk of stream) {
        void chunk;
        stream.controller.abort();
      }
    });
    expect(run.steps[0]).toMatchObject({ status: 'FAILED', output_data: { stream: true, error: 'STREAM_ABORTED' } });
  });
});
