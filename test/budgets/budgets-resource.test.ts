/**
 * Budgets as a resource (issue #51, part 1): `/v1/budgets` CRUD and its bad input, and rule 13
 * `budgets` at run start and step creation, per day, week and month, on every backend.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, startTestApi, type Caller, type TestApi } from '../support/harness.js';

const MODEL = 'gpt-4o-mini';
const PRICES = { input_cost_per_token: 0.00001, output_cost_per_token: 0.00004 };
const call = { type: 'MODEL_CALL', model: MODEL, tool_name: null };

describe.each(BACKENDS)('budgets on %s', (backend) => {
  let api: TestApi;
  // A Wednesday in Kolkata: its week started on Monday 2026-11-23, its month on the 1st.
  let now = new Date('2026-11-25T06:00:00Z');

  beforeAll(async () => {
    api = await startTestApi(backend, { clock: { now: () => now } });
  });
  afterAll(async () => {
    await api?.close();
  });

  let sequence = 0;
  /** A step of $0.002 (100 prompt and 25 completion tokens) when allowed; the step as created. */
  async function spend(ws: Caller, runId: string) {
    const step = (await ws.request('POST', `/v1/runs/${runId}/steps`, { ...call, sequence: ++sequence })).body;
    expect(step.status).toBeDefined();
    if (step.status === 'ALLOWED')
      await ws.request('PATCH', `/v1/runs/${runId}/steps/${step.id}`, {
        status: 'COMPLETED',
        prompt_tokens: 100,
        completion_tokens: 25,
      });
    return step;
  }

  async function workspace(settings: Record<string, unknown> = {}) {
    const ws = (await api.newWorkspace()).api;
    expect((await ws.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
    expect((await ws.request('PATCH', '/v1/workspace', { time_zone: 'Asia/Kolkata', ...settings })).status).toBe(200);
    return ws;
  }

  it('when budgets are created, listed, changed and removed, then each answer has its shape and window', async () => {
    now = new Date('2026-11-25T06:00:00Z');
    const ws = await workspace();
    const created = await ws.request('POST', '/v1/budgets', {
      scope: 'user',
      subject: 'ana',
      period: 'week',
      limit_usd: 5,
    });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      id: expect.any(String),
      scope: 'user',
      subject: 'ana',
      period: 'week',
      limit_usd: 5,
      action: 'deny',
      spend_usd: 0,
      // Monday 30 November at 00:00 in Kolkata.
      resets_at: '2026-11-29T18:30:00Z',
      created_at: expect.any(String),
    });
    const whole = await ws.request('POST', '/v1/budgets', {
      scope: 'workspace',
      period: 'month',
      limit_usd: 100,
      action: 'alert',
    });
    expect(whole.status).toBe(201);
    expect(whole.body).toMatchObject({ subject: null, action: 'alert', resets_at: '2026-11-30T18:30:00Z' });

    expect((await ws.request('GET', '/v1/budgets')).body).toHaveLength(2);
    expect(
      (await ws.request('GET', '/v1/budgets?scope=user&subject=ana')).body.map((b: { id: string }) => b.id),
    ).toEqual([created.body.id]);
    expect((await ws.request('GET', `/v1/budgets/${created.body.id}`)).body.id).toBe(created.body.id);

    const changed = await ws.request('PATCH', `/v1/budgets/${created.body.id}`, { period: 'day', limit_usd: 1.5 });
    expect(changed.status).toBe(200);
    expect(changed.body).toMatchObject({ period: 'day', limit_usd: 1.5, resets_at: '2026-11-25T18:30:00Z' });

    expect((await ws.request('DELETE', `/v1/budgets/${created.body.id}`)).status).toBe(204);
    expect((await ws.request('GET', `/v1/budgets/${created.body.id}`)).status).toBe(404);
    expect((await ws.request('DELETE', `/v1/budgets/${created.body.id}`)).status).toBe(404);
    // Another workspace's budget is not found.
    const other = (await api.newWorkspace()).api;
    expect((await other.request('GET', `/v1/budgets/${whole.body.id}`)).status).toBe(404);
  });

  it('when a budget is bad or a duplicate, then it is refused with the field named (422) or 409', async () => {
    const ws = await workspace();
    const refused = async (body: Record<string, unknown>, path: string) => {
      const res = await ws.request('POST', '/v1/budgets', body);
      expect(res.status).toBe(422);
      expect(res.body.code).toBe('VALIDATION_FAILED');
      expect(res.body.errors.map((e: { path: string }) => e.path)).toContain(path);
    };
    await refused({ scope: 'team', period: 'day', limit_usd: 1 }, 'body.scope');
    await refused({ scope: 'workspace', period: 'year', limit_usd: 1 }, 'body.period');
    await refused({ scope: 'workspace', period: 'day', limit_usd: -1 }, 'body.limit_usd');
    await refused({ scope: 'workspace', period: 'day', limit_usd: 1e12 }, 'body.limit_usd');
    await refused({ scope: 'workspace', subject: 'x', period: 'day', limit_usd: 1 }, 'body.subject');
    await refused({ scope: 'user', period: 'day', limit_usd: 1 }, 'body.subject');
    await refused({ scope: 'workspace', period: 'day', limit_usd: 1, extra: true }, 'body.extra');
    expect(
      (await ws.request('POST', '/v1/budgets', { scope: 'user', subject: 'u', period: 'day', limit_usd: 1 })).status,
    ).toBe(201);
    const twin = await ws.request('POST', '/v1/budgets', { scope: 'user', subject: 'u', period: 'day', limit_usd: 2 });
    expect(twin.status).toBe(409);
    expect(twin.body.code).toBe('CONFLICT');
    const week = (
      await ws.request('POST', '/v1/budgets', { scope: 'user', subject: 'u', period: 'week', limit_usd: 1 })
    ).body;
    expect((await ws.request('PATCH', `/v1/budgets/${week.id}`, { period: 'day' })).status).toBe(409);
    expect((await ws.request('PATCH', `/v1/budgets/${week.id}`, { limit_usd: -2 })).status).toBe(422);
  });

  it("when a user's weekly budget is spent, then the next step and the next run start are denied BUDGET_EXCEEDED with its detail", async () => {
    now = new Date('2026-11-23T06:00:00Z'); // Monday
    const ws = await workspace();
    const budget = (
      await ws.request('POST', '/v1/budgets', { scope: 'user', subject: 'weekly', period: 'week', limit_usd: 0.004 })
    ).body;
    const run = (await ws.request('POST', '/v1/runs', { user_id: 'weekly' })).body;
    expect(run.decision.evaluated_rules.budgets).toBe('PASS');
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
    now = new Date('2026-11-25T06:00:00Z'); // Wednesday: Monday's spend still counts
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
    const denied = await spend(ws, run.id);
    expect(denied.status).toBe('BLOCKED');
    expect(denied.decision).toMatchObject({
      outcome: 'DENY',
      reason: 'BUDGET_EXCEEDED',
      detail: {
        spend_usd: 0.004,
        budget_usd: 0.004,
        reserved_usd: 0,
        resets_at: '2026-11-29T18:30:00Z',
        budget_id: budget.id,
        scope: 'user',
        subject: 'weekly',
        period: 'week',
      },
    });
    const blocked = (await ws.request('POST', '/v1/runs', { user_id: 'weekly' })).body;
    expect(blocked.status).toBe('BLOCKED');
    expect(blocked.decision.reason).toBe('BUDGET_EXCEEDED');
    // Another user is not under this budget: no rule 13 at all.
    const free = (await ws.request('POST', '/v1/runs', { user_id: 'someone-else' })).body;
    expect(free.status).toBe('RUNNING');
    expect(free.decision.evaluated_rules.budgets).toBeUndefined();
    // Monday 30 November 00:00 in Kolkata: a new week.
    now = new Date('2026-11-29T18:30:00Z');
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
  });

  it('when several budgets are spent, then the workspace one is reported first, and a month counts every day of it', async () => {
    now = new Date('2026-11-02T06:00:00Z');
    const ws = await workspace();
    const run = (await ws.request('POST', '/v1/runs', { user_id: 'both' })).body;
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
    now = new Date('2026-11-20T06:00:00Z');
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
    const user = (
      await ws.request('POST', '/v1/budgets', { scope: 'user', subject: 'both', period: 'day', limit_usd: 0.002 })
    ).body;
    const month = (await ws.request('POST', '/v1/budgets', { scope: 'workspace', period: 'month', limit_usd: 0.004 }))
      .body;
    expect(month.spend_usd).toBe(0.004);
    const denied = await spend(ws, run.id);
    expect(denied.decision).toMatchObject({
      reason: 'BUDGET_EXCEEDED',
      detail: { budget_id: month.id, scope: 'workspace', subject: null, period: 'month', spend_usd: 0.004 },
    });
    // The month's budget removed: the user's day budget is the one spent.
    expect((await ws.request('DELETE', `/v1/budgets/${month.id}`)).status).toBe(204);
    expect((await spend(ws, run.id)).decision.detail).toMatchObject({ budget_id: user.id, period: 'day' });
    // An alert budget never denies.
    expect((await ws.request('PATCH', `/v1/budgets/${user.id}`, { action: 'alert' })).status).toBe(200);
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
  });

  it("when a budget's period changes, then its spend is the new window's, never carried over", async () => {
    now = new Date('2026-11-24T06:00:00Z'); // Tuesday
    const ws = await workspace();
    const run = (await ws.request('POST', '/v1/runs', { user_id: 'mover' })).body;
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
    now = new Date('2026-11-25T06:00:00Z'); // Wednesday
    const budget = (await ws.request('POST', '/v1/budgets', { scope: 'workspace', period: 'week', limit_usd: 0.002 }))
      .body;
    expect(budget.spend_usd).toBe(0.002);
    expect((await spend(ws, run.id)).decision.reason).toBe('BUDGET_EXCEEDED');
    // A day's window holds nothing spent today: the next step is allowed at once.
    const day = await ws.request('PATCH', `/v1/budgets/${budget.id}`, { period: 'day' });
    expect(day.body.spend_usd).toBe(0);
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
    expect((await spend(ws, run.id)).decision.reason).toBe('BUDGET_EXCEEDED');
  });

  it('when budgets reserve, then a step whose estimate would pass a budget is denied before it spends', async () => {
    now = new Date('2026-11-25T06:00:00Z');
    const ws = await workspace({ budget_mode: 'reserve', default_step_reservation_usd: 0.003 });
    await ws.request('POST', '/v1/budgets', { scope: 'user', subject: 'reserver', period: 'month', limit_usd: 0.005 });
    const run = (await ws.request('POST', '/v1/runs', { user_id: 'reserver' })).body;
    // Step 1 reserves $0.003; step 2's $0.003 would make $0.006 > $0.005.
    const first = (await ws.request('POST', `/v1/runs/${run.id}/steps`, { ...call, sequence: ++sequence })).body;
    expect(first.status).toBe('ALLOWED');
    const second = (await ws.request('POST', `/v1/runs/${run.id}/steps`, { ...call, sequence: ++sequence })).body;
    expect(second.decision).toMatchObject({ reason: 'BUDGET_EXCEEDED', detail: { reserved_usd: 0.003, spend_usd: 0 } });
  });
});
