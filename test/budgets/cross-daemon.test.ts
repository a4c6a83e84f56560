/**
 * The cross-daemon bound of read-your-writes (issue #34, part 1): daemons do not share their
 * pending spend, so another daemon counts a call's cost once its result is written and the
 * counters hold it (docs/budgets.md). Two apps on one Postgres (and one Redis) stand for two
 * daemons; the embedded database has one daemon by nature.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completionTokensFor, DEFAULT_REPLY, promptTokensFor } from '../support/fake-upstream.js';
import { startProxyTestApi, startSecondApp, type ProxyTestApi, type SecondApp } from '../support/harness.js';

const MODEL = 'gpt-4o-mini';
const chat = { model: MODEL, messages: [{ role: 'user', content: 'Which daemon am I talking to?' }] };
const callMicros = promptTokensFor(chat) * 10 + completionTokensFor(DEFAULT_REPLY) * 40;

describe.each(['postgres+redis', 'postgres+sql'] as const)('two daemons on %s', (backend) => {
  let daemonA: ProxyTestApi;
  let daemonB: SecondApp;

  beforeAll(async () => {
    daemonA = await startProxyTestApi(backend);
    daemonB = await startSecondApp(daemonA);
    await daemonA.request('PUT', `/v1/model-pricing/${MODEL}`, {
      input_cost_per_token: 0.00001,
      output_cost_per_token: 0.00004,
    });
    await daemonA.request('PATCH', '/v1/workspace', { user_daily_budget_usd: Math.floor(callMicros * 0.8) / 1e6 });
  });
  afterAll(async () => {
    await daemonB?.close();
    await daemonA?.close();
  });

  it("when a call was answered by one daemon, then another denies the next once the result is written (the bound's end)", async () => {
    const runId = (await daemonA.request('POST', '/v1/runs', { user_id: 'roamer' })).body.id;
    const call = (base: string) =>
      fetch(`${base}/proxy/runs/${runId}/openai/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer sk', 'x-runguard-key': daemonA.apiKey },
        body: JSON.stringify(chat),
      });
    const first = await call(daemonA.url);
    await first.text();
    expect(first.status).toBe(200);
    // The result's write and the counters' raise: what the other daemon waits for.
    for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
      const usage = (await daemonA.request('GET', '/v1/usage')).body;
      if (usage.workspace_daily_spend_usd * 1e6 >= callMicros) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const second = await call(daemonB.url);
    expect(second.status).toBe(403);
    expect((await second.json()).error.code).toBe('USER_DAILY_BUDGET_EXCEEDED');
  });
});
