/**
 * Denials that explain themselves (issue #34, part 6): every DENY carries `decision.detail`,
 * stored with the decision, answered by the API, written into the proxy's 403 message in the
 * provider's format, carried by the SDK's GuardBlockedError and printed by the CLI.
 */
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { printRun } from '../../src/cli/commands/runs.js';
import { createOutput } from '../../src/cli/output.js';
import { GuardBlockedError, GuardClient } from '../../clients/typescript/src/index.js';
import { completionTokensFor, DEFAULT_REPLY, promptTokensFor } from '../support/fake-upstream.js';
import { BACKENDS, startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

const MODEL = 'gpt-4o-mini';
const chat = { model: MODEL, messages: [{ role: 'user', content: 'Explain the denial to me.' }] };
const PRICES = { input_cost_per_token: 0.00001, output_cost_per_token: 0.00004 };
const callMicros = promptTokensFor(chat) * 10 + completionTokensFor(DEFAULT_REPLY) * 40;
const budgetMicros = Math.floor(callMicros * 0.8);

/** The end of today's UTC day, as the detail writes it. */
function tomorrow(): string {
  const now = new Date();
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1))
    .toISOString()
    .replace('.000Z', 'Z');
}

describe.each(BACKENDS)('denial detail on %s', (backend) => {
  let api: ProxyTestApi;

  beforeAll(async () => {
    api = await startProxyTestApi(backend);
    expect((await api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
    expect((await api.request('PATCH', '/v1/workspace', { user_daily_budget_usd: budgetMicros / 1e6 })).status).toBe(
      200,
    );
  });
  afterAll(async () => {
    await api?.close();
  });

  const proxyHeaders = { 'content-type': 'application/json', authorization: 'Bearer sk-provider' };

  it('when a budget denies a proxied call, then the 403 says the numbers and the stored step keeps them', async () => {
    const runId = (await api.request('POST', '/v1/runs', { user_id: 'explained' })).body.id;
    const url = `${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`;
    const headers = { ...proxyHeaders, 'x-runguard-key': api.apiKey };
    expect((await fetch(url, { method: 'POST', headers, body: JSON.stringify(chat) })).status).toBe(200);
    // The numbers below are the recorded ones: wait for the first call's result to be written
    // (read-your-writes before that is read-your-writes.test.ts's; a check made while the result
    // lands may count it twice, toward denying, and this test is about the message).
    for (let tries = 0; ; tries++) {
      const step = (await api.request('GET', `/v1/runs/${runId}`)).body.steps?.[0];
      if (step?.cost_usd != null) break;
      if (tries > 100) throw new Error('the first call was never recorded');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
    const denied = await fetch(url, { method: 'POST', headers, body: JSON.stringify(chat) });
    expect(denied.status).toBe(403);
    const spend = callMicros / 1e6;
    const budget = budgetMicros / 1e6;
    const sentence = `user daily budget spent: $${spend} of $${budget}; resets ${tomorrow()}`;
    expect(await denied.json()).toEqual({
      error: {
        type: 'guardrail_denied',
        code: 'USER_DAILY_BUDGET_EXCEEDED',
        param: null,
        message: `runguard denied this model call: USER_DAILY_BUDGET_EXCEEDED (${sentence}).`,
      },
    });

    // An Anthropic client reads the same numbers in its own format.
    const message = { model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] };
    const anthropic = await fetch(`${api.url}/proxy/runs/${runId}/anthropic/v1/messages`, {
      method: 'POST',
      headers,
      body: JSON.stringify(message),
    });
    expect(anthropic.status).toBe(403);
    const body = await anthropic.json();
    expect(body.error.message, JSON.stringify(body)).toContain(sentence);

    const run = (await api.request('GET', `/v1/runs/${runId}`)).body;
    expect(run.steps[1].decision).toEqual({
      outcome: 'DENY',
      reason: 'USER_DAILY_BUDGET_EXCEEDED',
      evaluated_rules: expect.any(Object),
      detail: { spend_usd: spend, budget_usd: budget, reserved_usd: 0, resets_at: tomorrow() },
    });
    expect(run.steps[0].decision).not.toHaveProperty('detail');

    // `runguard runs show` prints them.
    const stdout = new PassThrough();
    let printed = '';
    stdout.on('data', (chunk) => (printed += String(chunk)));
    printRun(createOutput(false, stdout), run);
    expect(printed).toContain(`Step 2 denied: DENY USER_DAILY_BUDGET_EXCEEDED (${sentence})`);
  });

  it('when a run start is denied by a spent budget, then its answer and its record carry the detail', async () => {
    const res = await api.request('POST', '/v1/runs', { user_id: 'explained' });
    const detail = {
      spend_usd: callMicros / 1e6,
      budget_usd: budgetMicros / 1e6,
      reserved_usd: 0,
      resets_at: tomorrow(),
    };
    expect(res.body).toMatchObject({ status: 'BLOCKED', decision: { reason: 'USER_DAILY_BUDGET_EXCEEDED', detail } });
    expect((await api.request('GET', `/v1/runs/${res.body.id}`)).body.decision.detail).toEqual(detail);
  });

  it('when the concurrency limit denies a run, then the API and the SDK give the counts', async () => {
    const ws = await api.newWorkspace('scale');
    expect((await ws.api.request('PATCH', '/v1/workspace', { max_concurrent_runs: 1 })).status).toBe(200);
    expect((await ws.api.request('POST', '/v1/runs', { user_id: 'a' })).body.status).toBe('RUNNING');
    const blocked = (await ws.api.request('POST', '/v1/runs', { user_id: 'b' })).body;
    expect(blocked.decision).toMatchObject({
      reason: 'MAX_CONCURRENT_RUNS_EXCEEDED',
      detail: { running: 1, limit: 1 },
    });
    expect((await ws.api.request('GET', `/v1/runs/${blocked.id}`)).body.decision.detail).toEqual({
      running: 1,
      limit: 1,
    });

    const guard = new GuardClient({ apiKey: ws.apiKey, baseUrl: api.url, maxRetries: 0 });
    try {
      const error = await guard.run('c', async () => 'ran').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(GuardBlockedError);
      expect((error as GuardBlockedError).detail).toEqual({ running: 1, limit: 1 });
      expect((error as GuardBlockedError).message).toContain('1 of 1 runs running');
    } finally {
      await guard.close();
    }
  });
});
