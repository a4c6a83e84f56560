/**
 * Budgets of scope `key` (issue #51, part 3): a step counts against the API key that made it (a
 * proxied call's key: its x-runguard-key, or the key that minted its proxy token), per day, week
 * and month, on every backend; the counters rebuilt after a Redis flush and reconciled; a revoked
 * key's budgets deleted with it; and 50 calls racing through two daemons in reserve mode never
 * over the key's budget.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reconcile } from '../../src/jobs/reconcile.js';
import { RedisCounters, redisClient } from '../../src/store/counters/redis-counters.js';
import { SqlCounters } from '../../src/store/counters/sql-counters.js';
import type { CounterStore } from '../../src/store/counters/counters.js';
import {
  BACKENDS,
  caller,
  startProxyTestApi,
  startSecondApp,
  startTestApi,
  type Caller,
  type ProxyTestApi,
  type SecondApp,
  type TestApi,
} from '../support/harness.js';
import { REDIS_URL } from '../support/services.js';

const MODEL = 'gpt-4o-mini';
const PRICES = { input_cost_per_token: 0.00001, output_cost_per_token: 0.00004 };
const call = { type: 'MODEL_CALL', model: MODEL, tool_name: null };

/** A second key of the workspace, with its own caller. */
async function newKey(api: TestApi, ws: Caller, role: 'agent' | 'admin' = 'agent') {
  const created = await ws.request('POST', '/v1/api-keys', { name: `key-${role}`, role });
  expect(created.status).toBe(201);
  return {
    id: created.body.id as string,
    secret: created.body.api_key as string,
    api: caller(api.url, created.body.api_key),
  };
}

/** The recorded spend of a key (all days), in microdollars. */
async function keySpendMicros(api: TestApi, workspaceId: string, keyId: string): Promise<number> {
  const { rows } = await api.stores.db.query<{ spend: string | null }>(
    'SELECT sum(spend_micros) AS spend FROM subject_usage_daily WHERE workspace_id = $1 AND subject = $2',
    [workspaceId, `key:${keyId}`],
  );
  return Number(rows[0]!.spend ?? 0);
}

describe.each(BACKENDS)('key budgets on %s', (backend) => {
  let api: TestApi;
  // A Wednesday in Kolkata: its week started on Monday 2026-11-23, its month on the 1st.
  let now = new Date('2026-11-25T06:00:00Z');
  let redis: Redis | null = null;

  beforeAll(async () => {
    api = await startTestApi(backend, { clock: { now: () => now } });
    if (backend === 'postgres+redis') redis = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    redis?.disconnect();
    await api?.close();
  });

  const flushRedis = async () => {
    if (!redis) return;
    for await (const keys of redis.scanStream({ match: `${api.stores.redisKeyPrefix}*`, count: 1_000 })) {
      if ((keys as string[]).length > 0) await redis.unlink(...(keys as string[]));
    }
  };

  /** The Redis copy's counters of a user with no id in the workspace (there is no such user). */
  const countersOfNoUser = async (workspaceId: string) => {
    const found: string[] = [];
    if (!redis) return found;
    const match = `${api.stores.redisKeyPrefix}{${workspaceId}}:uspend:*`;
    for await (const keys of redis.scanStream({ match, count: 1_000 }))
      found.push(...(keys as string[]).filter((key) => key.endsWith(':')));
    return found;
  };

  async function workspace() {
    const ws = await api.newWorkspace();
    expect((await ws.api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
    expect((await ws.api.request('PATCH', '/v1/workspace', { time_zone: 'Asia/Kolkata' })).status).toBe(200);
    return ws;
  }

  let sequence = 0;
  /** A step of $0.002 (100 prompt and 25 completion tokens) when allowed; the step as created. */
  async function spend(as: Caller, runId: string) {
    const step = (await as.request('POST', `/v1/runs/${runId}/steps`, { ...call, sequence: ++sequence })).body;
    expect(step.status, JSON.stringify(step)).toBeDefined();
    if (step.status === 'ALLOWED')
      await as.request('PATCH', `/v1/runs/${runId}/steps/${step.id}`, {
        status: 'COMPLETED',
        prompt_tokens: 100,
        completion_tokens: 25,
      });
    return step;
  }

  it("when a key budget names no key, another workspace's, or a revoked one, then it is a 422 naming body.subject", async () => {
    const ws = await workspace();
    const other = await workspace();
    const foreign = await newKey(api, other.api);
    const revoked = await newKey(api, ws.api);
    expect((await ws.api.request('DELETE', `/v1/api-keys/${revoked.id}`)).status).toBe(204);
    for (const subject of [
      undefined,
      null,
      'not-a-key',
      foreign.id,
      revoked.id,
      '00000000-0000-4000-8000-000000000000',
    ]) {
      const refused = await ws.api.request('POST', '/v1/budgets', {
        scope: 'key',
        subject,
        period: 'day',
        limit_usd: 1,
      });
      expect(refused.status).toBe(422);
      expect(refused.body.errors.map((e: { path: string }) => e.path)).toEqual(['body.subject']);
    }
  });

  it('when a key spends through the API, then its day, week and month budgets deny it in turn, and other keys go on', async () => {
    now = new Date('2026-11-25T06:00:00Z');
    const ws = await workspace();
    const agent = await newKey(api, ws.api);
    const budgets: Record<string, string> = {};
    for (const [period, limit_usd] of [
      ['day', 0.003],
      ['week', 0.005],
      ['month', 0.007],
    ] as const) {
      const created = await ws.api.request('POST', '/v1/budgets', {
        scope: 'key',
        subject: agent.id.toUpperCase(),
        period,
        limit_usd,
      });
      expect(created.status).toBe(201);
      expect(created.body).toMatchObject({ scope: 'key', subject: agent.id, period, spend_usd: 0 });
      budgets[period] = created.body.id;
    }
    const runId = (await agent.api.request('POST', '/v1/runs', { user_id: 'ci' })).body.id;
    // Wednesday: $0.002, $0.004, then the day's $0.003 is spent.
    expect((await spend(agent.api, runId)).status).toBe('ALLOWED');
    expect((await spend(agent.api, runId)).status).toBe('ALLOWED');
    const denied = await spend(agent.api, runId);
    expect(denied.decision).toMatchObject({
      outcome: 'DENY',
      reason: 'BUDGET_EXCEEDED',
      detail: {
        budget_id: budgets.day,
        scope: 'key',
        subject: agent.id,
        period: 'day',
        spend_usd: 0.004,
        budget_usd: 0.003,
      },
    });
    // The admin key's steps in the same run are not the agent key's.
    expect((await spend(ws.api, runId)).status).toBe('ALLOWED');
    // A run the key starts is judged by its budgets too.
    const blocked = (await agent.api.request('POST', '/v1/runs', { user_id: 'ci' })).body;
    expect(blocked).toMatchObject({ status: 'BLOCKED', decision: { reason: 'BUDGET_EXCEEDED' } });
    const listed = (await ws.api.request('GET', `/v1/budgets?scope=key&subject=${agent.id}`)).body;
    expect(listed.map((budget: { spend_usd: number }) => budget.spend_usd)).toEqual([0.004, 0.004, 0.004]);

    // Thursday: a new day; the week holds $0.004 of $0.005.
    now = new Date('2026-11-26T06:00:00Z');
    await flushRedis();
    expect((await spend(agent.api, runId)).status).toBe('ALLOWED');
    expect((await spend(agent.api, runId)).decision.detail).toMatchObject({
      budget_id: budgets.week,
      period: 'week',
      spend_usd: 0.006,
    });

    // Next Monday: a new week; the month holds $0.006 of $0.007.
    now = new Date('2026-11-30T06:00:00Z');
    expect((await spend(agent.api, runId)).status).toBe('ALLOWED');
    await flushRedis();
    expect((await spend(agent.api, runId)).decision.detail).toMatchObject({
      budget_id: budgets.month,
      period: 'month',
      spend_usd: 0.008,
    });
    expect(await keySpendMicros(api, ws.workspaceId, agent.id)).toBe(8_000);
  });

  it('when the key records drift, then reconcile finds and repairs them, and decisions read the repair', async () => {
    now = new Date('2026-11-25T06:00:00Z');
    const ws = await workspace();
    const agent = await newKey(api, ws.api);
    const runId = (await agent.api.request('POST', '/v1/runs', { user_id: 'ci' })).body.id;
    expect((await spend(agent.api, runId)).status).toBe('ALLOWED');
    expect(
      (await reconcile(api.stores.db, api.stores.counters, { now, days: 2, repair: false })).drifts.filter((drift) =>
        drift.key.startsWith(ws.workspaceId),
      ),
    ).toEqual([]);
    await api.stores.db.query('UPDATE subject_usage_daily SET spend_micros = 0 WHERE workspace_id = $1', [
      ws.workspaceId,
    ]);
    const report = await reconcile(api.stores.db, api.stores.counters, { now, days: 2, repair: true });
    expect(report.drifts).toContainEqual({
      kind: 'subject_usage',
      key: `${ws.workspaceId}/key:${agent.id}/2026-11-25`,
      expected: 'spend=2000',
      found: 'spend=0',
    });
    expect(await keySpendMicros(api, ws.workspaceId, agent.id)).toBe(2_000);
    // The subjects' copies were checked and repaired with a scope of no user: none was written,
    // nor by the usage report, which reads the workspace's spend so too.
    expect(await countersOfNoUser(ws.workspaceId)).toEqual([]);
    expect((await ws.api.request('GET', '/v1/usage')).body.workspace_daily_spend_usd).toBe(0.002);
    expect(await countersOfNoUser(ws.workspaceId)).toEqual([]);
    // A budget set now counts what the key spent before it.
    expect(
      (
        await ws.api.request('POST', '/v1/budgets', {
          scope: 'key',
          subject: agent.id,
          period: 'day',
          limit_usd: 0.002,
        })
      ).status,
    ).toBe(201);
    expect((await spend(agent.api, runId)).decision.detail).toMatchObject({ scope: 'key', spend_usd: 0.002 });
  });

  it('when a key is revoked, then its budgets are deleted with it', async () => {
    const ws = await workspace();
    const agent = await newKey(api, ws.api);
    const budget = await ws.api.request('POST', '/v1/budgets', {
      scope: 'key',
      subject: agent.id,
      period: 'day',
      limit_usd: 1,
    });
    expect(budget.status).toBe(201);
    const kept = await ws.api.request('POST', '/v1/budgets', {
      scope: 'user',
      subject: 'ana',
      period: 'day',
      limit_usd: 1,
    });
    expect((await ws.api.request('DELETE', `/v1/api-keys/${agent.id}`)).status).toBe(204);
    expect((await ws.api.request('GET', `/v1/budgets/${budget.body.id}`)).status).toBe(404);
    expect((await ws.api.request('GET', '/v1/budgets')).body.map((b: { id: string }) => b.id)).toEqual([kept.body.id]);
  });
});

const chat = { model: MODEL, max_tokens: 50, messages: [{ role: 'user', content: 'Count against my key.' }] };
/** The fake upstream reports 40 completion tokens: 1,600 microdollars and the prompt's. */
const COMPLETION_TOKENS = 40;

function proxied(url: string, headers: Record<string, string>) {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-provider', ...headers },
    body: JSON.stringify(chat),
  });
}

/** Waits until no step of the workspace is unfinished (every result written). */
async function settled(api: TestApi, workspaceId: string): Promise<void> {
  for (const deadline = Date.now() + 20_000; Date.now() < deadline;) {
    const { rows } = await api.stores.db.query<{ open: string | number }>(
      "SELECT count(*) AS open FROM steps WHERE workspace_id = $1 AND status = 'ALLOWED'",
      [workspaceId],
    );
    if (Number(rows[0]!.open) === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error('steps still unfinished after 20 s');
}

describe.each(BACKENDS)('proxied calls against their key on %s', (backend) => {
  let api: ProxyTestApi;

  beforeAll(async () => {
    api = await startProxyTestApi(backend, { upstream: { completionTokens: COMPLETION_TOKENS } });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('when calls are made with a key or with a token it minted, then they count against that key, and its budget denies the next', async () => {
    const ws = await api.newWorkspace('scale');
    expect((await ws.api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
    const agent = await newKey(api, ws.api);
    // A run-less call with the agent key: its run is the key's.
    const runless = await proxied(`${api.url}/proxy/openai/v1/chat/completions`, {
      'x-runguard-key': agent.secret,
      'x-runguard-user-id': 'bot',
    });
    expect(runless.status).toBe(200);
    await settled(api, ws.workspaceId);
    const { rows } = await api.stores.db.query<{ run_key: string; step_key: string }>(
      'SELECT r.api_key_id AS run_key, s.api_key_id AS step_key FROM runs r JOIN steps s ON s.run_id = r.id WHERE r.workspace_id = $1',
      [ws.workspaceId],
    );
    expect(rows).toEqual([{ run_key: agent.id, step_key: agent.id }]);
    const oneCall = await keySpendMicros(api, ws.workspaceId, agent.id);
    expect(oneCall).toBeGreaterThan(COMPLETION_TOKENS * 40);

    // A run the workspace's key started, a token another key minted: the calls are the minter's.
    const minter = await newKey(api, ws.api, 'admin');
    const runId = (await ws.api.request('POST', '/v1/runs', { user_id: 'bot' })).body.id;
    const token = (await minter.api.request('POST', `/v1/runs/${runId}/proxy-token`)).body;
    expect((await proxied(`${token.urls.openai}/chat/completions`, {})).status).toBe(200);
    await settled(api, ws.workspaceId);
    expect(await keySpendMicros(api, ws.workspaceId, minter.id)).toBe(oneCall);
    expect(await keySpendMicros(api, ws.workspaceId, agent.id)).toBe(oneCall);

    // A day budget of one call: the agent key's next call is denied, in words, and another key's is not.
    const budget = await ws.api.request('POST', '/v1/budgets', {
      scope: 'key',
      subject: agent.id,
      period: 'day',
      limit_usd: oneCall / 1e6,
    });
    expect(budget.status).toBe(201);
    const denied = await proxied(`${api.url}/proxy/openai/v1/chat/completions`, {
      'x-runguard-key': agent.secret,
      'x-runguard-user-id': 'bot',
    });
    expect(denied.status).toBe(403);
    const refusal = (await denied.json()) as { error: { code: string; message: string } };
    expect(refusal.error.code).toBe('BUDGET_EXCEEDED');
    expect(refusal.error.message).toContain('key');
    expect(
      (await proxied(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, { 'x-runguard-key': ws.apiKey }))
        .status,
    ).toBe(200);
  });
});

describe.each(['postgres+redis', 'postgres+sql'] as const)(
  'a key budget in reserve mode with two daemons on %s',
  (backend) => {
    let daemonA: ProxyTestApi;
    let daemonB: SecondApp;

    beforeAll(async () => {
      daemonA = await startProxyTestApi(backend, { upstream: { delayMs: 40, completionTokens: COMPLETION_TOKENS } });
      let countersB: CounterStore;
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
      await daemonA?.close();
    });

    it('when 50 calls with one key race through two daemons, then the key spends within its budget', async () => {
      const BUDGET_MICROS = 10_000;
      const ws = await daemonA.newWorkspace('scale');
      expect((await ws.api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
      expect((await ws.api.request('PATCH', '/v1/workspace', { budget_mode: 'reserve' })).status).toBe(200);
      const agent = await newKey(daemonA, ws.api);
      const created = await ws.api.request('POST', '/v1/budgets', {
        scope: 'key',
        subject: agent.id,
        period: 'month',
        limit_usd: BUDGET_MICROS / 1e6,
      });
      expect(created.status).toBe(201);
      const answers = await Promise.all(
        Array.from({ length: 50 }, async (_, i) => {
          const base = i % 2 === 0 ? daemonA.url : daemonB.url;
          const res = await proxied(`${base}/proxy/openai/v1/chat/completions`, {
            'x-runguard-key': agent.secret,
            'x-runguard-user-id': `racer-${i}`,
          });
          const body = (await res.json()) as { error?: { code?: string } };
          return { status: res.status, code: body.error?.code ?? null };
        }),
      );
      const allowed = answers.filter((answer) => answer.status === 200).length;
      expect(answers.filter((answer) => answer.status !== 200)).toEqual(
        Array(50 - allowed).fill({ status: 403, code: 'BUDGET_EXCEEDED' }),
      );
      expect(allowed).toBeGreaterThan(0);
      await settled(daemonA, ws.workspaceId);
      const spent = await keySpendMicros(daemonA, ws.workspaceId, agent.id);
      expect(spent).toBeLessThanOrEqual(BUDGET_MICROS);
      expect((await ws.api.request('GET', `/v1/budgets/${created.body.id}`)).body.spend_usd).toBe(spent / 1e6);
    }, 60_000);
  },
);
