/**
 * Read-your-writes for spend within one daemon (issue #34, part 1): an agent making calls one
 * after another must see each call's cost in the next check, although the results are written in
 * batches after their answers. On every backend, through the proxy (JSON and SSE, in a run and
 * run-less) and through the SDK.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GuardBlockedError, GuardClient } from '../../clients/typescript/src/index.js';
import { completionTokensFor, DEFAULT_REPLY, promptTokensFor } from '../support/fake-upstream.js';
import { BACKENDS, startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

const MODEL = 'gpt-4o-mini';
const chat = { model: MODEL, messages: [{ role: 'user', content: 'Count the costs of this call, please.' }] };
/** Prices that make one call a few hundred microdollars. */
const PRICES = { input_cost_per_token: 0.00001, output_cost_per_token: 0.00004 };
const callMicros = promptTokensFor(chat) * 10 + completionTokensFor(DEFAULT_REPLY) * 40;

describe.each(BACKENDS)('read-your-writes on %s', (backend) => {
  let api: ProxyTestApi;

  beforeAll(async () => {
    api = await startProxyTestApi(backend);
    expect((await api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
    // Each test has a user of its own: a user budget of 0.8 x one call, so one call spends it.
    const budget = Math.floor(callMicros * 0.8) / 1e6;
    expect((await api.request('PATCH', '/v1/workspace', { user_daily_budget_usd: budget })).status).toBe(200);
  });
  afterAll(async () => {
    await api?.close();
  });

  const headers = (user?: string) => ({
    'content-type': 'application/json',
    authorization: 'Bearer sk-provider',
    'x-runguard-key': api.apiKey,
    ...(user ? { 'x-runguard-user-id': user } : {}),
  });

  /** Four calls one after another, each read to its last byte: the statuses. */
  async function fourCalls(url: string, body: object, user?: string): Promise<number[]> {
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await fetch(url, { method: 'POST', headers: headers(user), body: JSON.stringify(body) });
      await res.text();
      statuses.push(res.status);
    }
    return statuses;
  }

  async function runOf(user: string): Promise<string> {
    const res = await api.request('POST', '/v1/runs', { user_id: user });
    expect(res.body.status).toBe('RUNNING');
    return res.body.id;
  }

  it('when four JSON calls follow each other in a run, then only the first is allowed', async () => {
    const runId = await runOf('json-agent');
    expect(await fourCalls(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, chat)).toEqual([
      200, 403, 403, 403,
    ]);
  });

  it('when four streamed calls follow each other in a run, then only the first is allowed', async () => {
    const runId = await runOf('sse-agent');
    const streamed = { ...chat, stream: true };
    expect(await fourCalls(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, streamed)).toEqual([
      200, 403, 403, 403,
    ]);
  });

  it('when four run-less calls follow each other, then only the first is allowed', async () => {
    expect(await fourCalls(`${api.url}/proxy/openai/v1/chat/completions`, chat, 'runless-agent')).toEqual([
      200, 403, 403, 403,
    ]);
  });

  it('when four SDK model calls follow each other, then only the first runs', async () => {
    const guard = new GuardClient({ apiKey: api.apiKey, baseUrl: api.url, maxRetries: 0 });
    try {
      const outcomes = await guard.run('sdk-agent', async (run) => {
        const seen: string[] = [];
        for (let i = 0; i < 4; i++) {
          try {
            await run.modelCall(
              async () => {
                const res = await fetch(`${api.upstream.url}/v1/chat/completions`, {
                  method: 'POST',
                  headers: headers(),
                  body: JSON.stringify(chat),
                });
                return (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
              },
              { model: MODEL, tokenExtractor: (r) => [r.usage.prompt_tokens, r.usage.completion_tokens] },
            );
            seen.push('ran');
          } catch (error) {
            if (!(error instanceof GuardBlockedError)) throw error;
            seen.push(error.denyReason ?? 'blocked');
          }
        }
        return seen;
      });
      expect(outcomes).toEqual([
        'ran',
        'USER_DAILY_BUDGET_EXCEEDED',
        'USER_DAILY_BUDGET_EXCEEDED',
        'USER_DAILY_BUDGET_EXCEEDED',
      ]);
    } finally {
      await guard.close();
    }
  });
});
