import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adapterFor } from '../../../src/proxy/providers/index.js';
import type { TokenFields } from '../../../src/proxy/providers/types.js';
import {
  completionTokensFor,
  DEFAULT_REPLY,
  promptTokensFor,
  startFakeUpstream,
  type FakeUpstream,
} from '../../support/fake-upstream.js';

/** The official SDKs pointed straight at the fake prove it answers like the real providers. */
let upstream: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  upstream = await startFakeUpstream({ cachedTokens: 2 });
  openai = new OpenAI({ baseURL: `${upstream.url}/v1`, apiKey: 'sk-test', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: upstream.url, apiKey: 'x', maxRetries: 0 });
});
afterAll(() => upstream.close());

const chatRequest = {
  model: 'gpt-4o-mini',
  messages: [{ role: 'user' as const, content: 'Say hello to the proxy tests.' }],
};
const messageRequest = {
  model: 'claude-sonnet-4-5',
  max_tokens: 64,
  messages: [{ role: 'user' as const, content: 'Say hello.' }],
};
const completion = completionTokensFor(DEFAULT_REPLY);

describe('fake upstream with the OpenAI SDK', () => {
  it('when a chat completion is created, then it returns the reply with deterministic usage', async () => {
    const result = await openai.chat.completions.create(chatRequest);
    expect(result.choices[0]?.message.content).toBe(DEFAULT_REPLY);
    expect(result.usage).toMatchObject({
      prompt_tokens: promptTokensFor(chatRequest),
      completion_tokens: completion,
      prompt_tokens_details: { cached_tokens: 2 },
    });
    const received = upstream.requests.at(-1);
    expect(received).toMatchObject({ method: 'POST', path: '/v1/chat/completions', body: chatRequest });
    expect(received?.headers.authorization).toBe('Bearer sk-test');
    expect(Object.keys(received?.headers ?? {}).filter((h) => h.startsWith('x-runguard'))).toEqual([]);
  });

  it('when a chat completion streams with include_usage, then the final chunk carries usage', async () => {
    const stream = await openai.chat.completions.create({
      ...chatRequest,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    const usages: unknown[] = [];
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) usages.push(chunk.usage);
    }
    expect(text).toBe(DEFAULT_REPLY);
    expect(usages).toEqual([
      expect.objectContaining({ prompt_tokens: promptTokensFor(chatRequest), completion_tokens: completion }),
    ]);
  });

  it('when a chat completion streams without include_usage, then no chunk carries usage', async () => {
    const stream = await openai.chat.completions.create({ ...chatRequest, stream: true });
    for await (const chunk of stream) expect(chunk.usage ?? null).toBeNull();
  });

  it('when a Responses call streams, then the completed response carries usage', async () => {
    const stream = openai.responses.stream({ model: 'gpt-4.1', input: 'Hello there' });
    const final = await stream.finalResponse();
    expect(final.output_text).toBe(DEFAULT_REPLY);
    expect(final.usage).toMatchObject({
      input_tokens: promptTokensFor({ input: 'Hello there' }),
      output_tokens: completion,
    });
  });

  it('when embeddings are created (base64 by default in the SDK), then vectors and usage come back', async () => {
    const result = await openai.embeddings.create({ model: 'text-embedding-3-small', input: ['a', 'b'] });
    expect(result.data.map((d) => d.embedding.length)).toEqual([8, 8]);
    expect(result.usage.prompt_tokens).toBe(1);
  });

  it('when the status is forced, then the SDK raises the matching error from an OpenAI error body', async () => {
    const error = await openai.chat.completions
      .create(chatRequest, { headers: { 'x-fake-status': '429' } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    expect(error).toMatchObject({ status: 429, code: 'fake_429' });
  });
});

describe('fake upstream with the Anthropic SDK', () => {
  const prompt = promptTokensFor(messageRequest);

  it('when a message is created, then it returns the reply with usage split like Anthropic', async () => {
    const result = await anthropic.messages.create(messageRequest);
    expect(result.content).toEqual([{ type: 'text', text: DEFAULT_REPLY }]);
    expect(result.usage).toMatchObject({
      input_tokens: prompt - 2,
      cache_read_input_tokens: 2,
      output_tokens: completion,
    });
    const received = upstream.requests.at(-1);
    // This SDK sends an apiKey as a bearer token, not `x-api-key`: the proxy must forward both.
    expect(received?.headers.authorization).toBe('Bearer x');
    expect(received?.headers['anthropic-version']).toBeTypeOf('string');
  });

  it('when messages.stream is used, then the final message carries the usage of message_start and message_delta', async () => {
    const final = await anthropic.messages.stream(messageRequest).finalMessage();
    expect(final.content).toEqual([{ type: 'text', text: DEFAULT_REPLY }]);
    expect(final.usage).toMatchObject({
      input_tokens: prompt - 2,
      cache_read_input_tokens: 2,
      output_tokens: completion,
    });
  });

  it('when create is called with stream: true, then the events arrive in Anthropic order', async () => {
    const stream = await anthropic.messages.create({ ...messageRequest, stream: true });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types[0]).toBe('message_start');
    expect(types.slice(-2)).toEqual(['message_delta', 'message_stop']);
    expect(types).toContain('content_block_delta');
  });

  it('when the status is forced, then the SDK raises the matching error from an Anthropic error body', async () => {
    const error = await anthropic.messages
      .create(messageRequest, { headers: { 'x-fake-status': '529' } })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect(error).toMatchObject({ status: 529, type: 'overloaded_error' });
  });

  it('when the guardrail denial body is answered with 403, then the SDK raises a permission error with the code', async () => {
    const { createServer } = await import('node:http');
    const denial = createServer((_req, res) => {
      res.writeHead(403, { 'content-type': 'application/json' });
      res.end(JSON.stringify(adapterFor('anthropic').denialBody('BUDGET_EXCEEDED', 'Budget reached')));
    });
    await new Promise<void>((resolve) => denial.listen(0, '127.0.0.1', resolve));
    const address = denial.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    try {
      const client = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: 'x', maxRetries: 0 });
      const error = await client.messages.create(messageRequest).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Anthropic.PermissionDeniedError);
      expect(error).toMatchObject({ errorCode: 'BUDGET_EXCEEDED' });
    } finally {
      denial.closeAllConnections();
      await new Promise((resolve) => denial.close(resolve));
    }
  });
});

describe('fake upstream read by the usage trackers', () => {
  /** Fetches raw bytes as the proxy will, feeding a tracker on the side; a cut body is tolerated. */
  async function trackRaw(
    provider: 'openai' | 'anthropic',
    path: string,
    body: unknown,
    headers: Record<string, string> = {},
  ): Promise<TokenFields> {
    const response = await fetch(upstream.url + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    const tracker = adapterFor(provider).usageTracker(path, response.headers.get('content-type') ?? undefined);
    try {
      for await (const chunk of response.body ?? []) tracker.push(chunk);
    } catch {
      return tracker.current(); // the broken connection: usage seen so far
    }
    return tracker.end();
  }

  it('when the OpenAI stream was rewritten to include usage, then the tracker reads it', async () => {
    const inspected = adapterFor('openai').inspectRequest('/v1/chat/completions', { ...chatRequest, stream: true });
    const usage = await trackRaw('openai', '/v1/chat/completions', inspected.rewrittenBody);
    expect(usage).toEqual({
      promptTokens: promptTokensFor(chatRequest),
      completionTokens: completion,
      cacheReadTokens: 2,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
    });
  });

  it('when the Anthropic stream breaks after message_start, then the tracker has the input usage', async () => {
    const usage = await trackRaw(
      'anthropic',
      '/v1/messages',
      { ...messageRequest, stream: true },
      { 'x-fake-abort-after-events': '2' },
    );
    expect(usage).toEqual({
      promptTokens: promptTokensFor(messageRequest),
      completionTokens: 1,
      cacheReadTokens: 2,
      cacheWriteTokens: 0,
      reasoningTokens: null,
    });
  });
});
