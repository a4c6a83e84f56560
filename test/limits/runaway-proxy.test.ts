/**
 * Runaway agents through the proxy (issue #39): a user rate denial is the provider's 429 with
 * Retry-After (worth retrying, so no `x-should-retry: false`), which the official SDKs raise as a
 * rate-limit error; the other runaway denials are the provider's 403 with the numbers in the
 * message. The loop rule compares whole request bodies, not their audit summary.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completionTokensFor, DEFAULT_REPLY, promptTokensFor } from '../support/fake-upstream.js';
import { BACKENDS, type Caller, startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

const chat = (content: string) => ({ model: 'gpt-4o-mini', messages: [{ role: 'user' as const, content }] });

describe.each(BACKENDS)('runaway denials through the proxy on %s', (backend) => {
  let api: ProxyTestApi;

  beforeAll(async () => {
    api = await startProxyTestApi(backend);
  });
  afterAll(async () => {
    await api?.close();
  });

  async function workspace(settings: Record<string, unknown>): Promise<{ ws: Caller; apiKey: string }> {
    const { api: ws, apiKey } = await api.newWorkspace();
    expect((await ws.request('PATCH', '/v1/workspace', settings)).status).toBe(200);
    return { ws, apiKey };
  }

  it("when a user's steps per minute are used up, then the call is the provider's 429 with Retry-After, and the SDK raises RateLimitError", async () => {
    const { apiKey } = await workspace({ user_steps_per_minute: 2 });
    const openai = new OpenAI({
      apiKey: 'sk-provider',
      baseURL: `${api.url}/proxy/openai/v1`,
      maxRetries: 0,
      defaultHeaders: { 'x-runguard-key': apiKey, 'x-runguard-user-id': 'busy' },
    });
    const firstSentAt = Date.now();
    await openai.chat.completions.create(chat('one'));
    await openai.chat.completions.create(chat('two'));
    const error = await openai.chat.completions.create(chat('three')).catch((caught: unknown) => caught);
    // The window frees a minute after the first call: less whatever time the three calls took.
    const elapsedSeconds = Math.ceil((Date.now() - firstSentAt) / 1000);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    const rateError = error as InstanceType<typeof OpenAI.RateLimitError>;
    expect(rateError.status).toBe(429);
    expect(rateError.code).toBe('USER_RATE_LIMITED');
    expect(Number(rateError.headers?.get('retry-after'))).toBeGreaterThanOrEqual(60 - elapsedSeconds);
    expect(Number(rateError.headers?.get('retry-after'))).toBeLessThanOrEqual(60);
    expect(rateError.headers?.get('x-should-retry')).toBeNull();
    expect(rateError.message).toMatch(
      /USER_RATE_LIMITED \(user step rate limit reached: 2 of 2 steps in 60 s; retry after \d+ s/,
    );
    // The first two reached the provider; the third did not.
    expect(api.upstream.requests.filter((r) => JSON.stringify(r.body).includes('three'))).toHaveLength(0);
  });

  it("when an Anthropic call is rate limited, then it is Anthropic's rate_limit_error with Retry-After", async () => {
    const { apiKey } = await workspace({ user_steps_per_minute: 1 });
    const anthropic = new Anthropic({
      apiKey: 'sk-ant',
      baseURL: `${api.url}/proxy/anthropic`,
      maxRetries: 0,
      defaultHeaders: { 'x-runguard-key': apiKey, 'x-runguard-user-id': 'busy' },
    });
    const ask = () =>
      anthropic.messages.create({ model: 'claude-test-1', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
    await ask();
    const error = await ask().catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Anthropic.RateLimitError);
    const rateError = error as InstanceType<typeof Anthropic.RateLimitError>;
    expect((rateError.error as { error: { type: string } }).error.type).toBe('rate_limit_error');
    expect(Number(rateError.headers?.get('retry-after'))).toBeGreaterThan(0);
  });

  it("when a run's step limit denies a proxied call, then it is the 403 that is not retried, with the numbers", async () => {
    const { ws, apiKey } = await workspace({});
    const run = (await ws.request('POST', '/v1/runs', { user_id: 'u', limits: { max_steps: 1 } })).body;
    const url = `${api.url}/proxy/runs/${run.id}/openai/v1/chat/completions`;
    const call = (content: string) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer sk', 'x-runguard-key': apiKey },
        body: JSON.stringify(chat(content)),
      });
    expect((await call('first')).status).toBe(200);
    const denied = await call('second');
    expect(denied.status).toBe(403);
    expect(denied.headers.get('x-should-retry')).toBe('false');
    expect(denied.headers.get('retry-after')).toBeNull();
    expect(await denied.json()).toEqual({
      error: {
        type: 'guardrail_denied',
        code: 'RUN_STEP_LIMIT_EXCEEDED',
        message: 'runguard denied this model call: RUN_STEP_LIMIT_EXCEEDED (run step limit reached: 1 of 1 steps).',
        param: null,
      },
    });
  });

  it('when a proxied run sends the same request again past the limit, then REPEATED_CALL_LOOP; different prompts of one size pass', async () => {
    const { ws, apiKey } = await workspace({ run_max_identical_calls: 1 });
    const run = (await ws.request('POST', '/v1/runs', { user_id: 'u' })).body;
    const openai = new OpenAI({
      apiKey: 'sk',
      baseURL: `${api.url}/proxy/runs/${run.id}/openai/v1`,
      maxRetries: 0,
      defaultHeaders: { 'x-runguard-key': apiKey },
    });
    // Same length, same message count: their audit summaries are equal, their bodies are not.
    await openai.chat.completions.create(chat('aaaa'));
    await openai.chat.completions.create(chat('bbbb'));
    const error = await openai.chat.completions.create(chat('bbbb')).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect((error as InstanceType<typeof OpenAI.PermissionDeniedError>).code).toBe('REPEATED_CALL_LOOP');
  });
});

describe.each(BACKENDS)('a run budget through the proxy on %s', (backend) => {
  let api: ProxyTestApi;

  beforeAll(async () => {
    api = await startProxyTestApi(backend);
    expect(
      (
        await api.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
          input_cost_per_token: 0.00001,
          output_cost_per_token: 0.00004,
        })
      ).status,
    ).toBe(200);
  });
  afterAll(async () => {
    await api?.close();
  });

  it("when a call's answer is back, then the run's next call counts its cost (read-your-writes), however fast it follows", async () => {
    const body = chat('What does this cost?');
    const callMicros = promptTokensFor(body) * 10 + completionTokensFor(DEFAULT_REPLY) * 40;
    for (let attempt = 0; attempt < 5; attempt++) {
      const run = (
        await api.request('POST', '/v1/runs', { user_id: 'thrifty', limits: { max_cost_usd: callMicros / 1e6 } })
      ).body;
      const call = () =>
        fetch(`${api.url}/proxy/runs/${run.id}/openai/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: 'Bearer sk', 'x-runguard-key': api.apiKey },
          body: JSON.stringify(body),
        });
      const first = await call();
      await first.text();
      expect(first.status).toBe(200);
      // At once: the first call's result may still be on its way to the records.
      const second = await call();
      expect(second.status).toBe(403);
      expect(((await second.json()) as { error: { code: string } }).error.code).toBe('RUN_BUDGET_EXCEEDED');
    }
  });
});
