/**
 * Budgets of scope `key` (issue #51, part 3): a step counts against the API key that made it (a
 * proxied call's key: its x-runguard-key, or the key that minted its proxy token), per day, week
 * and month, on every backend; the counters rebuilt after a Redis flush and reconciled; a revoked
 * key's budgets deleted with it; and 50 calls racing through two daemons in reserve mode never
 * over the key's budget.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { subjectOf } from '../../src/store/counters/counters.js';
import { MODEL, PRICES, settled, subjectSpendMicros, useBudgetsApi, WEDNESDAY } from '../support/budgets-api.js';
import { useDaemonPair } from '../support/daemon-pair.js';
import {
  BACKENDS,
  caller,
  startProxyTestApi,
  type Caller,
  type ProxyTestApi,
  type TestApi,
} from '../support/harness.js';

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
const keySpendMicros = (api: TestApi, workspaceId: string, keyId: string) =>
  subjectSpendMicros(api, workspaceId, subjectOf('key', keyId));

describe.each(BACKENDS)('key budgets on %s', (backend) => {
  const fixture = useBudgetsApi(backend);
  const { workspace, spend } = fixture;

  it("when a key budget names no key, another workspace's, or a revoked one, then it is a 422 naming body.subject", async () => {
    const ws = await workspace();
    const other = await workspace();
    const foreign = await newKey(fixture.api, other.api);
    const revoked = await newKey(fixture.api, ws.api);
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
    fixture.now = WEDNESDAY;
    const ws = await workspace();
    const agent = await newKey(fixture.api, ws.api);
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
    fixture.now = new Date('2026-11-26T06:00:00Z');
    await fixture.flushRedis();
    expect((await spend(agent.api, runId)).status).toBe('ALLOWED');
    expect((await spend(agent.api, runId)).decision.detail).toMatchObject({
      budget_id: budgets.week,
      period: 'week',
      spend_usd: 0.006,
    });

    // Next Monday: a new week; the month holds $0.006 of $0.007.
    fixture.now = new Date('2026-11-30T06:00:00Z');
    expect((await spend(agent.api, runId)).status).toBe('ALLOWED');
    await fixture.flushRedis();
    expect((await spend(agent.api, runId)).decision.detail).toMatchObject({
      budget_id: budgets.month,
      period: 'month',
      spend_usd: 0.008,
    });
    expect(await keySpendMicros(fixture.api, ws.workspaceId, agent.id)).toBe(8_000);
  });

  it('when the key records drift, then reconcile finds and repairs them, and decisions read the repair', async () => {
    fixture.now = WEDNESDAY;
    const ws = await workspace();
    const agent = await newKey(fixture.api, ws.api);
    const runId = (await agent.api.request('POST', '/v1/runs', { user_id: 'ci' })).body.id;
    expect((await spend(agent.api, runId)).status).toBe('ALLOWED');
    expect(
      (await fixture.reconcile({ repair: false })).drifts.filter((drift) => drift.key.startsWith(ws.workspaceId)),
    ).toEqual([]);
    await fixture.api.stores.db.query('UPDATE subject_usage_daily SET spend_micros = 0 WHERE workspace_id = $1', [
      ws.workspaceId,
    ]);
    const report = await fixture.reconcile({ repair: true });
    expect(report.drifts).toContainEqual({
      kind: 'subject_usage',
      key: `${ws.workspaceId}/key:${agent.id}/2026-11-25`,
      expected: 'spend=2000',
      found: 'spend=0',
    });
    expect(await keySpendMicros(fixture.api, ws.workspaceId, agent.id)).toBe(2_000);
    // The subjects' copies were checked and repaired with a scope of no user: none was written,
    // nor by the usage report, which reads the workspace's spend so too.
    expect(await fixture.countersOfNoUser(ws.workspaceId)).toEqual([]);
    expect((await ws.api.request('GET', '/v1/usage')).body.workspace_daily_spend_usd).toBe(0.002);
    expect(await fixture.countersOfNoUser(ws.workspaceId)).toEqual([]);
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
    const agent = await newKey(fixture.api, ws.api);
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
    const pair = useDaemonPair(backend, { upstream: { delayMs: 40, completionTokens: COMPLETION_TOKENS } });

    it('when 50 calls with one key race through two daemons, then the key spends within its budget', async () => {
      const BUDGET_MICROS = 10_000;
      const ws = await pair.a.newWorkspace('scale');
      expect((await ws.api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
      expect((await ws.api.request('PATCH', '/v1/workspace', { budget_mode: 'reserve' })).status).toBe(200);
      const agent = await newKey(pair.a, ws.api);
      const created = await ws.api.request('POST', '/v1/budgets', {
        scope: 'key',
        subject: agent.id,
        period: 'month',
        limit_usd: BUDGET_MICROS / 1e6,
      });
      expect(created.status).toBe(201);
      const answers = await Promise.all(
        Array.from({ length: 50 }, async (_, i) => {
          const base = i % 2 === 0 ? pair.a.url : pair.b.url;
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
      await settled(pair.a, ws.workspaceId);
      const spent = await keySpendMicros(pair.a, ws.workspaceId, agent.id);
      expect(spent).toBeLessThanOrEqual(BUDGET_MICROS);
      expect((await ws.api.request('GET', `/v1/budgets/${created.body.id}`)).body.spend_usd).toBe(spent / 1e6);
    }, 60_000);
  },
);
