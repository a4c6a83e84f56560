/**
 * `budget_mode: "reserve"` (issue #34, part 3): every model call reserves the upper bound of its
 * cost before it is allowed, so N calls in flight cannot pass a budget by N-1 calls. On every
 * backend, through real HTTP against a fake upstream, and with two daemons on one Postgres (and
 * one Redis).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { GuardBlockedError, GuardClient } from '../../clients/typescript/src/index.js';
import { RedisCounters, redisClient } from '../../src/store/counters/redis-counters.js';
import { outstandingReservations, runReservedMicros } from '../../src/store/reservations.js';
import { SqlCounters } from '../../src/store/counters/sql-counters.js';
import type { CounterStore } from '../../src/store/counters/counters.js';
import {
  BACKENDS,
  startTestApi,
  type Caller,
  type TestApi,
  startProxyTestApi,
  startSecondApp,
  type ProxyTestApi,
  type SecondApp,
} from '../support/harness.js';
import { REDIS_URL } from '../support/services.js';

const MODEL = 'gpt-4o-mini';
/** $10 and $40 per million tokens: a call's estimate is its bytes x 10 + max_tokens x 40 microdollars. */
const PRICES = { input_cost_per_token: 0.00001, output_cost_per_token: 0.00004 };
/** The fake upstream reports 40 completion tokens: 1,600 microdollars, within max_tokens 50. */
const COMPLETION_TOKENS = 40;
const chat = { model: MODEL, max_tokens: 50, messages: [{ role: 'user', content: 'Race to the budget.' }] };
const estimateMicros = Buffer.byteLength(JSON.stringify(chat)) * 10 + 50 * 40;
const BUDGET_MICROS = 10_000;

async function reserveWorkspace(api: TestApi, budget: Record<string, unknown>) {
  const ws = await api.newWorkspace('scale');
  expect((await ws.api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
  const patched = await ws.api.request('PATCH', '/v1/workspace', { budget_mode: 'reserve', ...budget });
  expect(patched.status).toBe(200);
  expect(patched.body.budget_mode).toBe('reserve');
  return ws;
}

function proxied(base: string, apiKey: string, user: string, extra: Record<string, string> = {}) {
  return fetch(`${base}/proxy/openai/v1/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: 'Bearer sk-provider',
      'x-runguard-key': apiKey,
      'x-runguard-user-id': user,
      ...extra,
    },
    body: JSON.stringify(chat),
  });
}

/** Calls at once from `calls` users, spread over `bases`: their statuses and denial codes. */
async function race(bases: string[], apiKey: string, calls: number) {
  const answers = await Promise.all(
    Array.from({ length: calls }, async (_, i) => {
      const res = await proxied(bases[i % bases.length]!, apiKey, `racer-${i}`);
      const body = (await res.json()) as { error?: { code?: string } };
      return { status: res.status, code: body.error?.code ?? null };
    }),
  );
  return answers;
}

/** Waits until no step of the workspace is unfinished (every result written), then its spend. */
async function settledSpendMicros(api: TestApi, ws: { workspaceId: string; api: Caller }): Promise<number> {
  for (const deadline = Date.now() + 20_000; Date.now() < deadline;) {
    const { rows } = await api.stores.db.query<{ open: string | number }>(
      "SELECT count(*) AS open FROM steps WHERE workspace_id = $1 AND status = 'ALLOWED'",
      [ws.workspaceId],
    );
    if (Number(rows[0]!.open) === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  const { rows } = await api.stores.db.query<{ spend: string | number | null }>(
    'SELECT sum(spend_micros) AS spend FROM usage_daily WHERE workspace_id = $1',
    [ws.workspaceId],
  );
  return Number(rows[0]!.spend ?? 0);
}

describe.each(BACKENDS)('reserve mode on %s', (backend) => {
  let api: ProxyTestApi;

  beforeAll(async () => {
    api = await startProxyTestApi(backend, { upstream: { delayMs: 40, completionTokens: COMPLETION_TOKENS } });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('when the settings are read and changed, then GET and PATCH /v1/workspace carry them and refuse bad values', async () => {
    const ws = await api.newWorkspace('scale');
    expect((await ws.api.request('GET', '/v1/workspace')).body).toMatchObject({
      budget_mode: 'spend',
      default_step_reservation_usd: 0.05,
    });
    const changed = await ws.api.request('PATCH', '/v1/workspace', {
      budget_mode: 'reserve',
      default_step_reservation_usd: 0.0125,
    });
    expect(changed.body).toMatchObject({ budget_mode: 'reserve', default_step_reservation_usd: 0.0125 });
    const reset = await ws.api.request('PATCH', '/v1/workspace', { default_step_reservation_usd: null });
    expect(reset.body.default_step_reservation_usd).toBe(0.05);
    for (const bad of [{ budget_mode: 'hold' }, { default_step_reservation_usd: -1 }]) {
      const refused = await ws.api.request('PATCH', '/v1/workspace', bad);
      expect(refused.status).toBe(422);
      expect(refused.body.code).toBeTypeOf('string');
    }
    const runId = (await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body.id;
    const negative = await ws.api.request('POST', `/v1/runs/${runId}/steps`, {
      type: 'MODEL_CALL',
      sequence: 1,
      max_cost_usd: -0.01,
    });
    expect(negative.status).toBe(422);
  });

  it('when 50 proxied calls with max_tokens race for a $0.01 budget, then total spend stays within it', async () => {
    const ws = await reserveWorkspace(api, { daily_budget_usd: BUDGET_MICROS / 1e6 });
    const answers = await race([api.url], ws.apiKey, 50);
    const allowed = answers.filter((a) => a.status === 200).length;
    expect(answers.filter((a) => a.status !== 200)).toEqual(
      Array(50 - allowed).fill({ status: 403, code: 'WORKSPACE_DAILY_BUDGET_EXCEEDED' }),
    );
    // At least as many as fit at once: the budget is not left idle either.
    expect(allowed).toBeGreaterThanOrEqual(Math.floor(BUDGET_MICROS / estimateMicros));
    expect(await settledSpendMicros(api, ws)).toBeLessThanOrEqual(BUDGET_MICROS);
    expect(await outstandingReservations(api.stores.db, ws.workspaceId, 'racer-0')).toEqual({
      workspaceReservedMicros: 0,
      userReservedMicros: 0,
    });
  }, 60_000);

  it('when a call fails without usage, then its reservation is released', async () => {
    // Room for one reservation only.
    const ws = await reserveWorkspace(api, { daily_budget_usd: (estimateMicros + 100) / 1e6 });
    const seen = api.upstream.requests.length;
    // Held upstream until the next call's decision is made, then answered 500.
    const failing = proxied(api.url, ws.apiKey, 'failer', { 'x-fake-status': '500', 'x-fake-hold': 'failing' });
    try {
      // A call is forwarded only once its reservation is held: the upstream having it is the sign.
      for (const deadline = Date.now() + 20_000; api.upstream.requests.length === seen;) {
        if (Date.now() > deadline) throw new Error('the failing call was never forwarded');
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      // While the first call is in flight, its reservation holds the budget.
      const held = await proxied(api.url, ws.apiKey, 'waiter');
      const heldBody = (await held.json()) as { error: { code: string; message: string } };
      expect(held.status).toBe(403);
      expect(heldBody.error.code).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
      expect(heldBody.error.message).toContain('reserved');
    } finally {
      api.upstream.release('failing');
    }
    const failed = await failing;
    await failed.text();
    expect(failed.status).toBe(500);
    await settledSpendMicros(api, ws);
    const after = await proxied(api.url, ws.apiKey, 'waiter');
    await after.text();
    expect(after.status).toBe(200);
  }, 60_000);

  it('when API steps carry max_cost_usd, then each reserves it until its result replaces it with the cost', async () => {
    const ws = await reserveWorkspace(api, { daily_budget_usd: 0.01 });
    const runId = (await ws.api.request('POST', '/v1/runs', { user_id: 'sdk-user' })).body.id;
    const step = (sequence: number, extra: Record<string, unknown>) =>
      ws.api.request('POST', `/v1/runs/${runId}/steps`, { type: 'MODEL_CALL', sequence, model: MODEL, ...extra });

    const first = await step(1, { max_cost_usd: 0.006 });
    expect(first.body.status).toBe('ALLOWED');
    expect(await runReservedMicros(api.stores.db, ws.workspaceId, runId)).toBe(6_000);
    const second = await step(2, { max_cost_usd: 0.006 });
    expect(second.body.status).toBe('BLOCKED');
    expect(second.body.decision).toMatchObject({
      reason: 'WORKSPACE_DAILY_BUDGET_EXCEEDED',
      detail: { spend_usd: 0, budget_usd: 0.01, reserved_usd: 0.006 },
    });

    // 10 x $10/M + 20 x $40/M = $0.0009 replaces the $0.006 reserved.
    const finished = await ws.api.request('PATCH', `/v1/runs/${runId}/steps/${first.body.id}`, {
      status: 'COMPLETED',
      prompt_tokens: 10,
      completion_tokens: 20,
    });
    expect(finished.status).toBe(200);
    expect((await step(3, { max_cost_usd: 0.006 })).body.status).toBe('ALLOWED');
    const fourth = await step(4, { max_cost_usd: 0.006 });
    expect(fourth.body.decision.detail).toMatchObject({ spend_usd: 0.0009, reserved_usd: 0.006 });

    // Without max_cost_usd, a model call reserves the workspace's default ($0.05: more than the budget).
    expect((await step(5, {})).body.status).toBe('BLOCKED');
    await ws.api.request('PATCH', '/v1/workspace', { default_step_reservation_usd: 0.001 });
    const small = await step(6, {});
    expect(small.body.status).toBe('ALLOWED');
    const { rows } = await api.stores.db.query<{ estimate_micros: string | number }>(
      'SELECT estimate_micros FROM steps WHERE id = $1',
      [small.body.id],
    );
    expect(Number(rows[0]!.estimate_micros)).toBe(1_000);
    expect(await runReservedMicros(api.stores.db, ws.workspaceId, runId)).toBe(7_000);

    // An ended run holds no reservation, whatever its steps were left as.
    await ws.api.request('POST', `/v1/runs/${runId}/end`, { status: 'FAILED' });
    expect(await runReservedMicros(api.stores.db, ws.workspaceId, runId)).toBe(0);
    expect((await outstandingReservations(api.stores.db, ws.workspaceId, 'sdk-user')).workspaceReservedMicros).toBe(0);
  });

  it('when an SDK model call passes maxCostUsd, then it is what the call reserves', async () => {
    const ws = await reserveWorkspace(api, { daily_budget_usd: 0.01 });
    const guard = new GuardClient({ apiKey: ws.apiKey, baseUrl: api.url, maxRetries: 0 });
    try {
      const outcome = await guard.run('sdk-agent', async (run) => {
        const ran = await run.modelCall(async () => 'small', { model: MODEL, maxCostUsd: 0.002 });
        const refused = await run
          .modelCall(async () => 'large', { model: MODEL, maxCostUsd: 0.02 })
          .catch((error: unknown) => (error instanceof GuardBlockedError ? error.denyReason : error));
        return [ran, refused];
      });
      expect(outcome).toEqual(['small', 'WORKSPACE_DAILY_BUDGET_EXCEEDED']);
    } finally {
      await guard.close();
    }
  });
});

describe('reserve mode across a Redis restart', () => {
  let api: TestApi;
  let redis: Redis;

  beforeAll(async () => {
    api = await startTestApi('postgres+redis');
    redis = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    redis?.disconnect();
    await api?.close();
  });

  const flushPrefix = async () => {
    for await (const keys of redis.scanStream({ match: `${api.stores.redisKeyPrefix}*`, count: 1_000 })) {
      if ((keys as string[]).length > 0) await redis.unlink(...(keys as string[]));
    }
  };

  it('when Redis loses its keys, then reservations are neither lost nor counted twice', async () => {
    const ws = await reserveWorkspace(api, { daily_budget_usd: 0.01 });
    const runId = (await ws.api.request('POST', '/v1/runs', { user_id: 'flushed' })).body.id;
    const step = (sequence: number) =>
      ws.api.request('POST', `/v1/runs/${runId}/steps`, {
        type: 'MODEL_CALL',
        sequence,
        model: MODEL,
        max_cost_usd: 0.006,
      });
    const first = await step(1);
    expect(first.body.status).toBe('ALLOWED');
    await flushPrefix();
    // Not lost: the first reservation still holds the budget.
    expect((await step(2)).body.decision).toMatchObject({ outcome: 'DENY', detail: { reserved_usd: 0.006 } });
    await ws.api.request('PATCH', `/v1/runs/${runId}/steps/${first.body.id}`, {
      status: 'COMPLETED',
      prompt_tokens: 10,
      completion_tokens: 20,
    });
    await flushPrefix();
    expect((await step(3)).body.status).toBe('ALLOWED');
    // Not counted twice: one reservation of $0.006 and the first call's $0.0009.
    expect((await step(4)).body.decision.detail).toMatchObject({ spend_usd: 0.0009, reserved_usd: 0.006 });
  });
});

describe.each(['postgres+redis', 'postgres+sql'] as const)('reserve mode with two daemons on %s', (backend) => {
  let daemonA: ProxyTestApi;
  let daemonB: SecondApp;
  let countersB: CounterStore;

  beforeAll(async () => {
    daemonA = await startProxyTestApi(backend, { upstream: { delayMs: 40, completionTokens: COMPLETION_TOKENS } });
    if (backend === 'postgres+redis') {
      const client = redisClient({ url: REDIS_URL, keyPrefix: daemonA.stores.redisKeyPrefix! });
      await client.connect();
      countersB = new RedisCounters(client, daemonA.stores.db);
    } else {
      countersB = new SqlCounters(daemonA.stores.db);
    }
    daemonB = await startSecondApp(daemonA, { counters: countersB });
  });
  afterAll(async () => {
    await daemonB?.close();
    await countersB?.close();
    await daemonA?.close();
  });

  it('when 50 calls race through two daemons, then total spend stays within the budget', async () => {
    const ws = await reserveWorkspace(daemonA, { daily_budget_usd: BUDGET_MICROS / 1e6 });
    const answers = await race([daemonA.url, daemonB.url], ws.apiKey, 50);
    const allowed = answers.filter((a) => a.status === 200).length;
    expect(allowed).toBeGreaterThanOrEqual(Math.floor(BUDGET_MICROS / estimateMicros));
    expect(answers.every((a) => a.status === 200 || a.code === 'WORKSPACE_DAILY_BUDGET_EXCEEDED')).toBe(true);
    expect(await settledSpendMicros(daemonA, ws)).toBeLessThanOrEqual(BUDGET_MICROS);
  }, 60_000);
});
