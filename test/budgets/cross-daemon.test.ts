/**
 * The cross-daemon bound of read-your-writes (issue #34, part 1): daemons do not share their
 * pending spend, so another daemon counts a call's cost once its result is written and the
 * counters hold it (docs/budgets.md). Two apps on one Postgres (and one Redis) stand for two
 * daemons; the embedded database has one daemon by nature.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/api/app.js';
import { createLogger } from '../../src/logger.js';
import { createProviderRegistry } from '../../src/proxy/provider-registry.js';
import {
  completionTokensFor,
  DEFAULT_REPLY,
  promptTokensFor,
  startFakeUpstream,
  type FakeUpstream,
} from '../support/fake-upstream.js';
import { startTestApi, TEST_AUTH, type TestApi } from '../support/harness.js';

const MODEL = 'gpt-4o-mini';
const chat = { model: MODEL, messages: [{ role: 'user', content: 'Which daemon am I talking to?' }] };
const callMicros = promptTokensFor(chat) * 10 + completionTokensFor(DEFAULT_REPLY) * 40;

describe.each(['postgres+redis', 'postgres+sql'] as const)('two daemons on %s', (backend) => {
  let upstream: FakeUpstream;
  let daemonA: TestApi;
  let daemonB: FastifyInstance;
  let urlB: string;
  let providers: ReturnType<typeof createProviderRegistry>;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    daemonA = await startTestApi(backend, { proxy: { upstream: upstream.url } });
    providers = createProviderRegistry([{ name: 'openai', type: 'openai', upstream: upstream.url }], {
      headersTimeoutMs: 10_000,
      connectTimeoutMs: 2_000,
    });
    daemonB = await buildApp({
      db: daemonA.stores.db,
      counters: daemonA.stores.counters,
      clock: { now: () => new Date() },
      logger: createLogger('silent'),
      version: 'test',
      bodyLimitBytes: 1024 * 1024,
      auth: TEST_AUTH,
      proxy: { providers, defaultApiKey: null, defaultUserId: null, bodyLimitBytes: 1024 * 1024 },
    });
    urlB = await daemonB.listen({ host: '127.0.0.1', port: 0 });
    await daemonA.request('PUT', `/v1/model-pricing/${MODEL}`, {
      input_cost_per_token: 0.00001,
      output_cost_per_token: 0.00004,
    });
    await daemonA.request('PATCH', '/v1/workspace', { user_daily_budget_usd: Math.floor(callMicros * 0.8) / 1e6 });
  });
  afterAll(async () => {
    await daemonB?.close();
    await providers?.close();
    await daemonA?.close();
    await upstream?.close();
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
    const second = await call(urlB);
    expect(second.status).toBe(403);
    expect((await second.json()).error.code).toBe('USER_DAILY_BUDGET_EXCEEDED');
  });
});
