/**
 * Runaway agents (issue #39) through the run API, on every backend: the workspace's defaults, a
 * run's own limits (tighter only), and each rule beyond the seed (run_step_limit, run_budget,
 * repeated_calls, user_rate) with its order after rules 1-4 and its detail.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, startTestApi, type Caller, type TestApi } from '../support/harness.js';

const MODEL = 'gpt-4o-mini';
const SEED_STEP = ['kill_switch', 'user_blocked', 'workspace_daily_budget', 'user_daily_budget'];

describe.each(BACKENDS)('runaway limits on %s', (backend) => {
  let api: TestApi;
  let nowMs = Date.now();
  /** A moving clock: the user rate's window is read from it. */
  const clock = { now: () => new Date(nowMs) };

  beforeAll(async () => {
    api = await startTestApi(backend, { clock });
  });
  afterAll(async () => {
    await api?.close();
  });

  /** A workspace of its own for each case: settings do not leak between them. */
  async function workspace(settings: Record<string, unknown>): Promise<Caller> {
    const { api: ws } = await api.newWorkspace();
    const patched = await ws.request('PATCH', '/v1/workspace', settings);
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    return ws;
  }

  const start = async (ws: Caller, body: Record<string, unknown> = {}) => {
    const started = await ws.request('POST', '/v1/runs', { user_id: 'agent', ...body });
    expect(started.status, JSON.stringify(started.body)).toBe(201);
    return started.body;
  };
  /** $0.00001 a prompt token, $0.00004 a completion token. */
  const priceModel = async (ws: Caller) => {
    const priced = await ws.request('PUT', `/v1/model-pricing/${MODEL}`, {
      input_cost_per_token: 0.00001,
      output_cost_per_token: 0.00004,
    });
    expect(priced.status).toBe(200);
  };
  let sequence = 0;
  const step = async (ws: Caller, runId: string, body: Record<string, unknown> = {}) => {
    const created = await ws.request('POST', `/v1/runs/${runId}/steps`, {
      type: 'TOOL_CALL',
      tool_name: 'search',
      sequence: ++sequence,
      input_data: { q: `query ${sequence}` },
      ...body,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    return created.body;
  };

  it('when the workspace sets the defaults, then GET shows them and null turns one off', async () => {
    const ws = await workspace({
      run_max_steps: 50,
      run_max_cost_usd: 2.5,
      run_max_identical_calls: 4,
      user_steps_per_minute: 120,
    });
    expect((await ws.request('GET', '/v1/workspace')).body).toMatchObject({
      run_max_steps: 50,
      run_max_cost_usd: 2.5,
      run_max_identical_calls: 4,
      user_steps_per_minute: 120,
    });
    const off = await ws.request('PATCH', '/v1/workspace', { run_max_steps: null });
    expect(off.body.run_max_steps).toBeNull();
    expect(off.body.run_max_cost_usd).toBe(2.5);
  });

  it('when a limit is not a positive integer, then the PATCH and the start are 422', async () => {
    const ws = await workspace({});
    expect((await ws.request('PATCH', '/v1/workspace', { run_max_steps: 0 })).status).toBe(422);
    expect((await ws.request('PATCH', '/v1/workspace', { user_steps_per_minute: 1.5 })).status).toBe(422);
    expect((await ws.request('POST', '/v1/runs', { user_id: 'u', limits: { max_steps: -1 } })).status).toBe(422);
    expect((await ws.request('POST', '/v1/runs', { user_id: 'u', limits: { max_loops: 3 } })).status).toBe(422);
  });

  it("when a run asks for limits, then the tighter of its own and the workspace's apply, and its record shows them", async () => {
    const ws = await workspace({ run_max_steps: 10, run_max_cost_usd: 1 });
    const run = await start(ws, { limits: { max_steps: 100, max_cost_usd: 0.25, max_identical_calls: 2 } });
    // Looser than the workspace: clamped to it; tighter: its own.
    const applied = { max_steps: 10, max_cost_usd: 0.25, max_identical_calls: 2 };
    expect(run.limits).toEqual(applied);
    expect((await ws.request('GET', `/v1/runs/${run.id}`)).body.limits).toEqual(applied);
  });

  it('when neither sets a limit, then the run has none and its steps evaluate rules 1 to 4 only', async () => {
    const ws = await workspace({});
    const run = await start(ws);
    expect(run.limits).toBeUndefined();
    expect((await ws.request('GET', `/v1/runs/${run.id}`)).body.limits).toEqual({
      max_steps: null,
      max_cost_usd: null,
      max_identical_calls: null,
    });
    expect(Object.keys((await step(ws, run.id)).decision.evaluated_rules)).toEqual(SEED_STEP);
  });

  it('when a run reaches max_steps, then the next step is denied with its numbers, and denied steps do not count', async () => {
    const ws = await workspace({ run_max_steps: 3, run_max_identical_calls: 1 });
    const run = await start(ws);
    expect((await step(ws, run.id, { input_data: { q: 'a' } })).status).toBe('ALLOWED');
    // The same call again: denied by the loop rule, so not one of the three.
    const loop = await step(ws, run.id, { input_data: { q: 'a' } });
    expect(loop.decision.reason).toBe('REPEATED_CALL_LOOP');
    expect((await step(ws, run.id)).status).toBe('ALLOWED');
    const third = await step(ws, run.id);
    expect(third.status).toBe('ALLOWED');
    expect(third.decision.evaluated_rules).toEqual({
      ...Object.fromEntries(SEED_STEP.map((key) => [key, 'PASS'])),
      run_step_limit: 'PASS',
      repeated_calls: 'PASS',
    });
    const fourth = await step(ws, run.id);
    expect(fourth.status).toBe('BLOCKED');
    expect(fourth.decision).toEqual({
      outcome: 'DENY',
      reason: 'RUN_STEP_LIMIT_EXCEEDED',
      evaluated_rules: { ...Object.fromEntries(SEED_STEP.map((key) => [key, 'PASS'])), run_step_limit: 'DENY' },
      detail: { steps: 3, limit: 3 },
    });
    const detail = (await ws.request('GET', `/v1/runs/${run.id}`)).body;
    expect(detail.steps.map((s: { status: string }) => s.status)).toEqual([
      'ALLOWED',
      'BLOCKED',
      'ALLOWED',
      'ALLOWED',
      'BLOCKED',
    ]);
    expect(detail.steps[4].decision.detail).toEqual({ steps: 3, limit: 3 });
  });

  it('when the run is over its limit and the user is blocked too, then USER_BLOCKED comes first', async () => {
    const ws = await workspace({});
    const run = await start(ws, { limits: { max_steps: 1 } });
    await step(ws, run.id);
    expect((await ws.request('PUT', '/v1/users/agent', { blocked: true })).status).toBe(200);
    const denied = await step(ws, run.id);
    expect(denied.decision.reason).toBe('USER_BLOCKED');
    expect(denied.decision.evaluated_rules).toEqual({ kill_switch: 'PASS', user_blocked: 'DENY' });
  });

  it('when the daily budget is spent and the run is over its limit, then the budget denial comes first', async () => {
    const ws = await workspace({ run_max_steps: 1 });
    const run = await start(ws);
    await step(ws, run.id);
    // After the start, which the budget would deny too.
    expect((await ws.request('PATCH', '/v1/workspace', { daily_budget_usd: 0 })).status).toBe(200);
    const denied = await step(ws, run.id);
    expect(denied.decision.reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    expect(denied.decision.evaluated_rules.run_step_limit).toBeUndefined();
  });

  it("when the run's recorded cost reaches max_cost_usd, then the next step is denied RUN_BUDGET_EXCEEDED", async () => {
    const ws = await workspace({});
    await priceModel(ws);
    const run = await start(ws, { limits: { max_cost_usd: 0.002 } });
    const call = { type: 'MODEL_CALL', model: MODEL, tool_name: null };
    const first = await step(ws, run.id, call);
    expect(first.decision.evaluated_rules.run_budget).toBe('PASS');
    // 100 prompt tokens at $0.00001, 25 completion tokens at $0.00004: $0.002.
    const finished = await ws.request('PATCH', `/v1/runs/${run.id}/steps/${first.id}`, {
      status: 'COMPLETED',
      prompt_tokens: 100,
      completion_tokens: 25,
    });
    expect(finished.status).toBe(200);
    const denied = await step(ws, run.id, call);
    expect(denied.decision.reason).toBe('RUN_BUDGET_EXCEEDED');
    expect(denied.decision.detail).toEqual({ run_cost_usd: 0.002, reserved_usd: 0, limit_usd: 0.002 });
  });

  it("when budgets reserve, then a run's steps in flight and this step's estimate count against its max_cost_usd", async () => {
    // Reserve mode: an API step without max_cost_usd reserves the workspace's default ($0.05).
    const ws = await workspace({ budget_mode: 'reserve' });
    await priceModel(ws);
    const run = await start(ws, { limits: { max_cost_usd: 0.12 } });
    const call = { type: 'MODEL_CALL', model: MODEL, tool_name: null };
    const first = await step(ws, run.id, call);
    expect(first.status).toBe('ALLOWED');
    expect((await step(ws, run.id, call)).status).toBe('ALLOWED');
    // $0.10 reserved + this step's $0.05 would pass $0.12.
    const third = await step(ws, run.id, call);
    expect(third.decision).toMatchObject({
      reason: 'RUN_BUDGET_EXCEEDED',
      detail: { run_cost_usd: 0, reserved_usd: 0.1, limit_usd: 0.12 },
    });
    // The first call's result replaces its reservation with its cost ($0.002): room again.
    await ws.request('PATCH', `/v1/runs/${run.id}/steps/${first.id}`, {
      status: 'COMPLETED',
      prompt_tokens: 100,
      completion_tokens: 25,
    });
    expect((await step(ws, run.id, call)).status).toBe('ALLOWED');
  });

  it('when more than max_identical_calls consecutive calls are the same (keys in any order), then the loop is denied', async () => {
    const ws = await workspace({ run_max_identical_calls: 2 });
    const run = await start(ws);
    const same = (input: Record<string, unknown>) => step(ws, run.id, { input_data: input });
    expect((await same({ q: 'weather', options: { city: 'Oslo', units: 'C' } })).status).toBe('ALLOWED');
    expect((await same({ options: { units: 'C', city: 'Oslo' }, q: 'weather' })).status).toBe('ALLOWED');
    const third = await same({ q: 'weather', options: { units: 'C', city: 'Oslo' } });
    expect(third.decision).toMatchObject({
      outcome: 'DENY',
      reason: 'REPEATED_CALL_LOOP',
      detail: { identical_calls: 2, limit: 2 },
    });
    // Still the same loop: denied again, whatever the number of tries.
    expect((await same({ q: 'weather', options: { city: 'Oslo', units: 'C' } })).decision.reason).toBe(
      'REPEATED_CALL_LOOP',
    );
  });

  it('when equal calls are not consecutive, then the loop rule does not trip', async () => {
    const ws = await workspace({ run_max_identical_calls: 1 });
    const run = await start(ws);
    for (let round = 0; round < 3; round++) {
      expect((await step(ws, run.id, { input_data: { q: 'a' } })).status).toBe('ALLOWED');
      expect((await step(ws, run.id, { input_data: { q: 'b' } })).status).toBe('ALLOWED');
    }
    // Another tool with the same input is another call.
    expect((await step(ws, run.id, { tool_name: 'fetch', input_data: { q: 'b' } })).status).toBe('ALLOWED');
  });

  it("when a user's steps per minute are used up across runs, then the next is denied with when to retry, until the window moves", async () => {
    const ws = await workspace({ user_steps_per_minute: 3 });
    const [runA, runB] = [await start(ws), await start(ws)];
    const other = await start(ws, { user_id: 'someone-else' });
    expect((await step(ws, runA.id)).status).toBe('ALLOWED');
    nowMs += 10_000;
    expect((await step(ws, runB.id)).status).toBe('ALLOWED');
    expect((await step(ws, runA.id)).status).toBe('ALLOWED');
    const denied = await step(ws, runB.id);
    expect(denied.decision.outcome).toBe('DENY');
    expect(denied.decision.reason).toBe('USER_RATE_LIMITED');
    expect(denied.decision.evaluated_rules.user_rate).toBe('DENY');
    // The first step leaves the window 60 s after it was allowed: 50 s from now.
    expect(denied.decision.detail).toEqual({
      steps_in_window: 3,
      limit: 3,
      window_s: 60,
      retry_after_s: 50,
      retry_at: new Date(nowMs + 50_000).toISOString().replace(/\.\d{3}Z$/, 'Z'),
    });
    // Another user has a window of their own.
    expect((await step(ws, other.id)).status).toBe('ALLOWED');
    nowMs += 50_001;
    expect((await step(ws, runB.id)).status).toBe('ALLOWED');
    expect((await step(ws, runA.id)).decision.reason).toBe('USER_RATE_LIMITED');
  });
});
