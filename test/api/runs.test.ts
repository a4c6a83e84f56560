/**
 * The run API through real HTTP, against each storage backend: Postgres with Redis counters,
 * Postgres with SQL counters, and the embedded default.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, startTestApi, type TestApi } from '../support/harness.js';

const UNKNOWN = '00000000-0000-4000-8000-000000000000';

describe.each(BACKENDS)('run API on %s', (backend) => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startTestApi(backend);
  });
  afterAll(async () => {
    await api?.close();
  });

  const startRun = async (userId = 'user-1', extra: Record<string, unknown> = {}) => {
    const res = await api.request('POST', '/v1/runs/', { user_id: userId, ...extra });
    expect(res.status).toBe(201);
    return res.body;
  };
  const step = (runId: string, sequence: number, extra: Record<string, unknown> = {}) =>
    api.request('POST', `/v1/runs/${runId}/steps`, { type: 'MODEL_CALL', sequence, model: 'm', ...extra });
  const finish = (runId: string, stepId: string, body: Record<string, unknown>) =>
    api.request('PATCH', `/v1/runs/${runId}/steps/${stepId}`, body);

  /** A workspace of its own, so that limits set by one test do not leak into another. */
  const freshWorkspace = async (values: Record<string, unknown> = {}) => {
    const ws = await api.newWorkspace();
    if (Object.keys(values).length) await api.setWorkspace(values, ws.workspaceId);
    return ws;
  };

  describe('run lifecycle', () => {
    it('when runs and steps are created, then their ids are UUIDv7 stamped with their start and creation times', async () => {
      const run = await startRun('ids');
      const created = await step(run.id, 1);
      expect(created.status).toBe(201);
      const detail = await api.request('GET', `/v1/runs/${run.id}`);
      const v7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
      const millis = (id: string) => parseInt(id.slice(0, 8) + id.slice(9, 13), 16);
      expect(run.id).toMatch(v7);
      expect(created.body.id).toMatch(v7);
      expect(millis(run.id)).toBe(Date.parse(detail.body.started_at));
      expect(millis(created.body.id)).toBe(Date.parse(detail.body.steps[0].created_at));
    });

    it('when a run starts, ends and is read back, then every field of the contract is there', async () => {
      const run = await startRun('alice', { metadata: { ticket: 42, tags: ['a'] } });
      expect(run).toMatchObject({ user_id: 'alice', status: 'RUNNING', decision: { outcome: 'ALLOW', reason: null } });
      expect(Object.keys(run.decision.evaluated_rules)).toEqual([
        'kill_switch',
        'user_blocked',
        'workspace_daily_budget',
        'user_daily_budget',
        'monthly_run_limit',
        'max_concurrent_runs',
      ]);
      const s1 = await step(run.id, 1, { input_data: { prompt: 'hi' } });
      expect(s1.status).toBe(201);
      expect(s1.body).toMatchObject({ status: 'ALLOWED', sequence: 1, decision: { outcome: 'ALLOW', reason: null } });
      const s2 = await api.request('POST', `/v1/runs/${run.id}/steps`, {
        type: 'TOOL_CALL',
        sequence: 2,
        tool_name: 'search',
      });
      expect(
        (
          await finish(run.id, s1.body.id, {
            status: 'COMPLETED',
            duration_ms: 12,
            prompt_tokens: 10,
            completion_tokens: 5,
          })
        ).body,
      ).toEqual({ id: s1.body.id, status: 'COMPLETED' });
      expect((await finish(run.id, s2.body.id, { status: 'FAILED', duration_ms: 3 })).body.status).toBe('FAILED');

      const ended = await api.request('POST', `/v1/runs/${run.id}/end`, { status: 'COMPLETED' });
      expect(ended.status).toBe(200);
      expect(ended.body).toEqual({ id: run.id, status: 'COMPLETED', ended_at: expect.stringMatching(/Z$/) });

      const detail = await api.request('GET', `/v1/runs/${run.id}`);
      expect(detail.status).toBe(200);
      expect(detail.body).toMatchObject({
        id: run.id,
        user_id: 'alice',
        status: 'COMPLETED',
        metadata: { ticket: 42, tags: ['a'] },
        ended_at: ended.body.ended_at,
        step_count: 2,
        total_tokens: 15,
        total_cost_usd: 0,
      });
      expect(detail.body.duration_ms).toBe(Date.parse(ended.body.ended_at) - Date.parse(detail.body.started_at));
      expect(detail.body.steps.map((s: any) => [s.sequence, s.type, s.status])).toEqual([
        [1, 'MODEL_CALL', 'COMPLETED'],
        [2, 'TOOL_CALL', 'FAILED'],
      ]);
      expect(detail.body.steps[0]).toMatchObject({
        model: 'm',
        tool_name: null,
        prompt_tokens: 10,
        completion_tokens: 5,
        duration_ms: 12,
        cost_usd: null,
        input_data: { prompt: 'hi' },
        decision: { outcome: 'ALLOW', reason: null, evaluated_rules: { kill_switch: 'PASS' } },
      });
      expect(Object.keys(detail.body.steps[0].decision.evaluated_rules)).toEqual([
        'kill_switch',
        'user_blocked',
        'workspace_daily_budget',
        'user_daily_budget',
      ]);
      expect(detail.body.steps[1]).toMatchObject({ tool_name: 'search', prompt_tokens: null, completion_tokens: null });
    });

    it('when a run is ended twice or a finished step is updated again, then 409 and nothing changes', async () => {
      const run = await startRun();
      const s = await step(run.id, 1);
      await finish(run.id, s.body.id, { status: 'COMPLETED', prompt_tokens: 1 });
      const again = await finish(run.id, s.body.id, { status: 'FAILED', prompt_tokens: 999 });
      expect(again.status).toBe(409);
      expect(again.body.code).toBe('STEP_ALREADY_FINISHED');
      await api.request('POST', `/v1/runs/${run.id}/end`, { status: 'FAILED' });
      const twice = await api.request('POST', `/v1/runs/${run.id}/end`, { status: 'COMPLETED' });
      expect(twice.status).toBe(409);
      expect(twice.body).toMatchObject({ code: 'RUN_NOT_RUNNING', detail: expect.any(String) });
      const late = await step(run.id, 2);
      expect(late.status).toBe(409);
      expect(late.body.code).toBe('RUN_NOT_RUNNING');
      const detail = (await api.request('GET', `/v1/runs/${run.id}`)).body;
      expect(detail.status).toBe('FAILED');
      expect(detail.steps).toHaveLength(1);
      expect(detail.steps[0]).toMatchObject({ status: 'COMPLETED', prompt_tokens: 1 });
    });

    it('when a sequence is reused in a run, then 409 DUPLICATE_SEQUENCE', async () => {
      const run = await startRun();
      expect((await step(run.id, 1)).status).toBe(201);
      const dup = await step(run.id, 1);
      expect(dup.status).toBe(409);
      expect(dup.body.code).toBe('DUPLICATE_SEQUENCE');
      expect((await api.request('GET', `/v1/runs/${run.id}`)).body.step_count).toBe(1);
    });

    it("when a path spells ids in uppercase, then they name the same run and step, and the step's cost counts", async () => {
      const ws = await freshWorkspace({ daily_budget_micros: 100_000 });
      await ws.api.request('PUT', '/v1/model-pricing/dime', { input_cost_per_token: 0.1, output_cost_per_token: 0 });
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body;
      const RUN = run.id.toUpperCase();
      const s = await ws.api.request('POST', `/v1/runs/${RUN}/steps`, {
        type: 'MODEL_CALL',
        sequence: 1,
        model: 'dime',
      });
      expect(s.status).toBe(201);
      expect(s.body.run_id).toBe(run.id);
      const finished = await ws.api.request('PATCH', `/v1/runs/${RUN}/steps/${s.body.id.toUpperCase()}`, {
        status: 'COMPLETED',
        prompt_tokens: 1,
      });
      expect(finished.status).toBe(200);
      expect(finished.body).toEqual({ id: s.body.id, status: 'COMPLETED' });
      // Its 0.1 USD reached the budget: the next step is denied.
      const next = await ws.api.request('POST', `/v1/runs/${RUN}/steps`, {
        type: 'MODEL_CALL',
        sequence: 2,
        model: 'dime',
      });
      expect(next.body).toMatchObject({ status: 'BLOCKED', decision: { reason: 'WORKSPACE_DAILY_BUDGET_EXCEEDED' } });
      const ended = await ws.api.request('POST', `/v1/runs/${RUN}/end`, { status: 'COMPLETED' });
      expect(ended.status).toBe(200);
      expect(ended.body.id).toBe(run.id);
      expect((await ws.api.request('GET', '/v1/usage')).body).toMatchObject({
        concurrent_runs: 0,
        workspace_daily_spend_usd: 0.1,
      });
      // A form that ajv's uuid format takes and Postgres does not: refused as malformed, not a 500.
      const urn = await ws.api.request('GET', `/v1/runs/urn:uuid:${run.id}`);
      expect(urn.status).toBe(422);
      expect(urn.body.errors).toEqual([{ path: 'params.run_id', message: 'must be a UUID' }]);
    });

    it('when ids are unknown, then 404 on every run and step endpoint', async () => {
      const run = await startRun();
      const s = await step(run.id, 1);
      const cases = await Promise.all([
        api.request('GET', `/v1/runs/${UNKNOWN}`),
        api.request('POST', `/v1/runs/${UNKNOWN}/end`, { status: 'COMPLETED' }),
        api.request('POST', `/v1/runs/${UNKNOWN}/steps`, { type: 'INPUT', sequence: 1 }),
        finish(UNKNOWN, s.body.id, { status: 'COMPLETED' }),
        finish(run.id, UNKNOWN, { status: 'COMPLETED' }),
      ]);
      expect(cases.map((c) => c.status)).toEqual([404, 404, 404, 404, 404]);
      expect(cases.map((c) => c.body.code)).toEqual([
        'RUN_NOT_FOUND',
        'RUN_NOT_FOUND',
        'RUN_NOT_FOUND',
        'STEP_NOT_FOUND',
        'STEP_NOT_FOUND',
      ]);
    });

    it("when another workspace's run is addressed, then 404 as if it did not exist", async () => {
      const run = await startRun();
      const s = await step(run.id, 1);
      const other = (await api.newWorkspace()).api;
      const cases = await Promise.all([
        other.request('GET', `/v1/runs/${run.id}`),
        other.request('POST', `/v1/runs/${run.id}/end`, { status: 'COMPLETED' }),
        other.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 2 }),
        other.request('PATCH', `/v1/runs/${run.id}/steps/${s.body.id}`, { status: 'COMPLETED' }),
      ]);
      expect(cases.map((c) => c.status)).toEqual([404, 404, 404, 404]);
      expect((await other.request('GET', '/v1/runs')).body).toMatchObject({ items: [], total: 0 });
      expect((await api.request('GET', `/v1/runs/${run.id}`)).body.status).toBe('RUNNING');
    });
  });

  describe('guardrails at run start', () => {
    it('when the kill switch is on, then a start is BLOCKED (201) with only the first rule evaluated', async () => {
      const ws = await freshWorkspace({ kill_switch_active: true });
      const res = await ws.api.request('POST', '/v1/runs', { user_id: 'u' });
      expect(res.status).toBe(201);
      expect(res.body).toMatchObject({
        status: 'BLOCKED',
        decision: { outcome: 'DENY', reason: 'KILL_SWITCH_ACTIVE', evaluated_rules: { kill_switch: 'DENY' } },
      });
      const detail = (await ws.api.request('GET', `/v1/runs/${res.body.id}`)).body;
      expect(detail).toMatchObject({ status: 'BLOCKED', duration_ms: 0, decision: { reason: 'KILL_SWITCH_ACTIVE' } });
      expect(detail.ended_at).toBe(detail.started_at);
    });

    it('when a user is blocked, then their starts are denied USER_BLOCKED and other users are not', async () => {
      const ws = await freshWorkspace();
      await api.stores.db.query('INSERT INTO sdk_users (workspace_id, user_id, blocked) VALUES ($1, $2, true)', [
        ws.workspaceId,
        'bad',
      ]);
      const bad = await ws.api.request('POST', '/v1/runs', { user_id: 'bad' });
      expect(bad.body.decision).toEqual({
        outcome: 'DENY',
        reason: 'USER_BLOCKED',
        evaluated_rules: { kill_switch: 'PASS', user_blocked: 'DENY' },
        detail: { user_blocked: true },
      });
      expect((await ws.api.request('POST', '/v1/runs', { user_id: 'good' })).body.status).toBe('RUNNING');
    });

    it('when the workspace budget is 0, then starts are denied WORKSPACE_DAILY_BUDGET_EXCEEDED', async () => {
      const ws = await freshWorkspace({ daily_budget_micros: 0 });
      const res = await ws.api.request('POST', '/v1/runs', { user_id: 'u' });
      expect(res.body.decision.reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    });

    it('when the per-user budget is 0, then starts are denied USER_DAILY_BUDGET_EXCEEDED', async () => {
      const ws = await freshWorkspace({ user_daily_budget_micros: 0 });
      const res = await ws.api.request('POST', '/v1/runs', { user_id: 'u' });
      expect(res.body.decision.reason).toBe('USER_DAILY_BUDGET_EXCEEDED');
    });

    it('when a user has a budget override, then it replaces the workspace per-user budget', async () => {
      const ws = await freshWorkspace({ user_daily_budget_micros: 0 });
      await api.stores.db.query(
        'INSERT INTO sdk_users (workspace_id, user_id, daily_budget_micros) VALUES ($1, $2, 5000000)',
        [ws.workspaceId, 'vip'],
      );
      expect((await ws.api.request('POST', '/v1/runs', { user_id: 'vip' })).body.status).toBe('RUNNING');
      expect((await ws.api.request('POST', '/v1/runs', { user_id: 'other' })).body.status).toBe('BLOCKED');
    });

    it('when the monthly limit is reached, then the next start is denied MONTHLY_RUN_LIMIT_EXCEEDED; blocked starts do not count', async () => {
      const ws = await freshWorkspace({ monthly_run_limit: 2 });
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body);
      expect(statuses.map((r) => r.status)).toEqual(['RUNNING', 'RUNNING', 'BLOCKED']);
      expect(statuses[2].decision.reason).toBe('MONTHLY_RUN_LIMIT_EXCEEDED');
      expect(Object.keys(statuses[2].decision.evaluated_rules)).toHaveLength(5);
      // Ending runs frees concurrency, not the month.
      for (const r of statuses.slice(0, 2))
        await ws.api.request('POST', `/v1/runs/${r.id}/end`, { status: 'COMPLETED' });
      expect((await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body.decision.reason).toBe(
        'MONTHLY_RUN_LIMIT_EXCEEDED',
      );
    });

    it('when the concurrency limit is reached, then starts are denied until a run ends', async () => {
      const ws = await freshWorkspace({ max_concurrent_runs: 1 });
      const first = (await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body;
      const second = (await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body;
      expect(first.status).toBe('RUNNING');
      expect(second.decision).toEqual({
        outcome: 'DENY',
        reason: 'MAX_CONCURRENT_RUNS_EXCEEDED',
        evaluated_rules: {
          kill_switch: 'PASS',
          user_blocked: 'PASS',
          workspace_daily_budget: 'PASS',
          user_daily_budget: 'PASS',
          monthly_run_limit: 'PASS',
          max_concurrent_runs: 'DENY',
        },
        detail: { running: 1, limit: 1 },
      });
      await ws.api.request('POST', `/v1/runs/${first.id}/end`, { status: 'FAILED' });
      expect((await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body.status).toBe('RUNNING');
    });

    it('when 50 starts race against max_concurrent_runs = 5, then exactly 5 are admitted', async () => {
      const ws = await freshWorkspace({ max_concurrent_runs: 5 });
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => ws.api.request('POST', '/v1/runs', { user_id: `u${i % 7}` })),
      );
      expect(results.every((r) => r.status === 201)).toBe(true);
      const running = results.filter((r) => r.body.status === 'RUNNING');
      expect(running).toHaveLength(5);
      expect(results.filter((r) => r.body.decision.reason === 'MAX_CONCURRENT_RUNS_EXCEEDED')).toHaveLength(45);
      const listed = await ws.api.request('GET', '/v1/runs?status=RUNNING');
      expect(listed.body.total).toBe(5);
    });
  });

  describe('guardrails at step creation', () => {
    it('when monthly and concurrency limits are exhausted mid-run, then steps of running runs are still allowed', async () => {
      const ws = await freshWorkspace({ monthly_run_limit: 1, max_concurrent_runs: 1 });
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body;
      expect((await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body.status).toBe('BLOCKED');
      const s = await ws.api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 1 });
      expect(s.body).toMatchObject({ status: 'ALLOWED', decision: { outcome: 'ALLOW' } });
      expect(Object.keys(s.body.decision.evaluated_rules)).toHaveLength(4);
    });

    it('when the kill switch is turned on mid-run, then the next step is BLOCKED and stored as an audit record', async () => {
      const ws = await freshWorkspace();
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body;
      expect(
        (await ws.api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 1 })).body.status,
      ).toBe('ALLOWED');
      expect((await ws.api.request('POST', '/v1/workspace/kill-switch', { active: true })).status).toBe(200);
      const denied = await ws.api.request('POST', `/v1/runs/${run.id}/steps`, {
        type: 'MODEL_CALL',
        sequence: 2,
        model: 'm',
      });
      expect(denied.status).toBe(201);
      expect(denied.body).toMatchObject({
        status: 'BLOCKED',
        decision: { outcome: 'DENY', reason: 'KILL_SWITCH_ACTIVE' },
      });
      const blockedPatch = await ws.api.request('PATCH', `/v1/runs/${run.id}/steps/${denied.body.id}`, {
        status: 'COMPLETED',
      });
      expect(blockedPatch.status).toBe(409);
      const detail = (await ws.api.request('GET', `/v1/runs/${run.id}`)).body;
      expect(detail.steps.map((s: any) => s.status)).toEqual(['ALLOWED', 'BLOCKED']);
      expect(detail.steps[1].decision.evaluated_rules).toEqual({ kill_switch: 'DENY' });
      await ws.api.request('POST', '/v1/workspace/kill-switch', { active: false });
      expect(
        (await ws.api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 3 })).body.status,
      ).toBe('ALLOWED');
    });

    it('when a user is blocked mid-run, then the next step is denied USER_BLOCKED', async () => {
      const ws = await freshWorkspace();
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'mallory' })).body;
      await api.stores.db.query('UPDATE sdk_users SET blocked = true WHERE workspace_id = $1 AND user_id = $2', [
        ws.workspaceId,
        'mallory',
      ]);
      const res = await ws.api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 1 });
      expect(res.body.decision).toMatchObject({ outcome: 'DENY', reason: 'USER_BLOCKED' });
    });

    it('when spend reaches the workspace budget mid-run, then the next step is denied', async () => {
      const ws = await freshWorkspace({ daily_budget_micros: 250_000 });
      await ws.api.request('PUT', '/v1/model-pricing/priced', { input_cost_per_token: 0.1, output_cost_per_token: 0 });
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body;
      for (const seq of [1, 2, 3]) {
        const s = await ws.api.request('POST', `/v1/runs/${run.id}/steps`, {
          type: 'MODEL_CALL',
          sequence: seq,
          model: 'priced',
        });
        expect(s.body.status).toBe('ALLOWED'); // spend before each: 0, 0.1, 0.2 < 0.25
        await ws.api.request('PATCH', `/v1/runs/${run.id}/steps/${s.body.id}`, {
          status: 'COMPLETED',
          prompt_tokens: 1,
          completion_tokens: 0,
        });
      }
      const fourth = await ws.api.request('POST', `/v1/runs/${run.id}/steps`, {
        type: 'MODEL_CALL',
        sequence: 4,
        model: 'priced',
      });
      expect(fourth.body.decision.reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
      // A new run start is denied too, by the same budget.
      expect((await ws.api.request('POST', '/v1/runs', { user_id: 'other' })).body.decision.reason).toBe(
        'WORKSPACE_DAILY_BUDGET_EXCEEDED',
      );
    });

    it("when a user's spend reaches the per-user budget, then only that user's steps are denied", async () => {
      const ws = await freshWorkspace({ user_daily_budget_micros: 100_000 });
      await ws.api.request('PUT', '/v1/model-pricing/priced', {
        input_cost_per_token: 0.05,
        output_cost_per_token: 0.05,
      });
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'spender' })).body;
      const s = await ws.api.request('POST', `/v1/runs/${run.id}/steps`, {
        type: 'MODEL_CALL',
        sequence: 1,
        model: 'priced',
      });
      await ws.api.request('PATCH', `/v1/runs/${run.id}/steps/${s.body.id}`, {
        status: 'COMPLETED',
        prompt_tokens: 1,
        completion_tokens: 1,
      });
      const next = await ws.api.request('POST', `/v1/runs/${run.id}/steps`, {
        type: 'MODEL_CALL',
        sequence: 2,
        model: 'priced',
      });
      expect(next.body.decision).toMatchObject({ reason: 'USER_DAILY_BUDGET_EXCEEDED' });
      expect((await ws.api.request('POST', '/v1/runs', { user_id: 'saver' })).body.status).toBe('RUNNING');
    });
  });

  describe('cost', () => {
    it('when three steps cost 0.1 USD each, then the run totals exactly 0.3', async () => {
      const ws = await freshWorkspace();
      await ws.api.request('PUT', '/v1/model-pricing/dime', { input_cost_per_token: 0.1, output_cost_per_token: 0 });
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body;
      for (const seq of [1, 2, 3]) {
        const s = await ws.api.request('POST', `/v1/runs/${run.id}/steps`, {
          type: 'MODEL_CALL',
          sequence: seq,
          model: 'dime',
        });
        await ws.api.request('PATCH', `/v1/runs/${run.id}/steps/${s.body.id}`, {
          status: 'COMPLETED',
          prompt_tokens: 1,
        });
      }
      const detail = (await ws.api.request('GET', `/v1/runs/${run.id}`)).body;
      expect(detail.total_cost_usd).toBe(0.3);
      expect(detail.steps.map((s: any) => s.cost_usd)).toEqual([0.1, 0.1, 0.1]);
      const listed = (await ws.api.request('GET', '/v1/runs')).body.items[0];
      expect(listed).toMatchObject({ id: run.id, total_cost_usd: 0.3, total_tokens: 3, step_count: 3 });
      const spend = await api.stores.db.query<{ spend_micros: string }>(
        'SELECT spend_micros FROM usage_daily WHERE workspace_id = $1',
        [ws.workspaceId],
      );
      expect(Number(spend.rows[0]!.spend_micros)).toBe(300_000);
    });

    it('when prices are per-token fractions, then cost is exact: prompt x input + completion x output', async () => {
      const ws = await freshWorkspace();
      const price = await ws.api.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
        input_cost_per_token: 1.5e-7,
        output_cost_per_token: 6e-7,
      });
      expect(price.status).toBe(200);
      expect(price.body).toMatchObject({
        model: 'gpt-4o-mini',
        input_cost_per_token: 1.5e-7,
        output_cost_per_token: 6e-7,
        is_active: true,
      });
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'u' })).body;
      const s = await ws.api.request('POST', `/v1/runs/${run.id}/steps`, {
        type: 'MODEL_CALL',
        sequence: 1,
        model: 'gpt-4o-mini',
      });
      await ws.api.request('PATCH', `/v1/runs/${run.id}/steps/${s.body.id}`, {
        status: 'COMPLETED',
        prompt_tokens: 1234,
        completion_tokens: 567,
      });
      const detail = (await ws.api.request('GET', `/v1/runs/${run.id}`)).body;
      // 1234 x 0.00000015 + 567 x 0.0000006 = 0.0001851 + 0.0003402 = 0.0005253
      expect(detail.steps[0].cost_usd).toBe(0.0005253);
    });

    it('when the model has no pricing, or no tokens are reported, then cost_usd is null', async () => {
      const run = await startRun();
      const unpriced = await step(run.id, 1, { model: 'nobody-priced-this' });
      await finish(run.id, unpriced.body.id, { status: 'COMPLETED', prompt_tokens: 100, completion_tokens: 100 });
      await api.request('PUT', '/v1/model-pricing/priced2', {
        input_cost_per_token: 0.001,
        output_cost_per_token: 0.002,
      });
      const noTokens = await step(run.id, 2, { model: 'priced2' });
      await finish(run.id, noTokens.body.id, { status: 'COMPLETED', duration_ms: 1 });
      const steps = (await api.request('GET', `/v1/runs/${run.id}`)).body.steps;
      expect(steps.map((s: any) => s.cost_usd)).toEqual([null, null]);
    });

    it('when a pricing entry is upserted again, then it is updated in place and listed once', async () => {
      const ws = await freshWorkspace();
      const a = await ws.api.request('PUT', '/v1/model-pricing/x', {
        input_cost_per_token: 1,
        output_cost_per_token: 2,
      });
      const b = await ws.api.request('PUT', '/v1/model-pricing/x', {
        input_cost_per_token: 3,
        output_cost_per_token: 4,
      });
      expect(b.body.id).toBe(a.body.id);
      await ws.api.request('PUT', '/v1/model-pricing/off', {
        input_cost_per_token: 1,
        output_cost_per_token: 1,
        is_active: false,
      });
      const list = await ws.api.request('GET', '/v1/model-pricing/');
      expect(list.body).toEqual([
        {
          id: a.body.id,
          model: 'x',
          input_cost_per_token: 3,
          output_cost_per_token: 4,
          cache_read_input_cost_per_token: null,
          cache_write_input_cost_per_token: null,
          long_context: null,
          is_active: true,
          source: 'user',
        },
      ]);
      expect((await api.request('GET', '/v1/model-pricing')).body.some((p: any) => p.model === 'x')).toBe(false);
    });
  });

  describe('listing', () => {
    it('when runs are listed, then newest first, filtered, paginated and counted', async () => {
      const ws = await freshWorkspace();
      const ids: string[] = [];
      for (let i = 0; i < 7; i++)
        ids.push((await ws.api.request('POST', '/v1/runs', { user_id: i % 2 ? 'odd' : 'even' })).body.id);
      await ws.api.request('POST', `/v1/runs/${ids[0]}/end`, { status: 'COMPLETED' });
      const page1 = (await ws.api.request('GET', '/v1/runs?per_page=3')).body;
      const page3 = (await ws.api.request('GET', '/v1/runs?per_page=3&page=3')).body;
      expect(page1).toMatchObject({ total: 7, page: 1, per_page: 3 });
      expect(page1.items.map((r: any) => r.id)).toEqual(ids.slice(4).reverse());
      expect(page3.items.map((r: any) => r.id)).toEqual([ids[0]]);
      expect((await ws.api.request('GET', '/v1/runs?page=4&per_page=3')).body.items).toEqual([]);
      expect((await ws.api.request('GET', '/v1/runs?user_id=odd')).body.total).toBe(3);
      expect((await ws.api.request('GET', '/v1/runs?status=COMPLETED')).body.items.map((r: any) => r.id)).toEqual([
        ids[0],
      ]);
      expect((await ws.api.request('GET', '/v1/runs?status=RUNNING&user_id=even')).body.total).toBe(3);
      const defaults = (await ws.api.request('GET', '/v1/runs')).body;
      expect(defaults).toMatchObject({ page: 1, per_page: 50 });
      expect(Object.keys(defaults.items[0]).sort()).toEqual([
        'denial_reason',
        'denied_steps',
        'ended_at',
        'id',
        'models',
        'started_at',
        'status',
        'step_count',
        'tags',
        'total_cost_usd',
        'total_tokens',
        'unpriced_calls',
        'user_id',
      ]);
    });

    it('when steps name models, then the list gives each run its models once, in first-use order, denied calls included', async () => {
      const ws = await freshWorkspace();
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'models' })).body;
      const toolOnly = (await ws.api.request('POST', '/v1/runs', { user_id: 'models' })).body;
      const stepIn = (runId: string, sequence: number, body: Record<string, unknown>) =>
        ws.api.request('POST', `/v1/runs/${runId}/steps`, { type: 'MODEL_CALL', sequence, ...body });
      await stepIn(run.id, 1, { model: 'gpt-4o-mini' });
      await stepIn(run.id, 2, { type: 'TOOL_CALL', tool_name: 'search' });
      await stepIn(run.id, 3, { model: 'gpt-4o' });
      await stepIn(run.id, 4, { model: 'gpt-4o-mini' });
      await stepIn(toolOnly.id, 1, { type: 'TOOL_CALL', tool_name: 'search' });
      // Denied: the kill switch stores the step BLOCKED, and the model it named still shows.
      expect((await ws.api.request('POST', '/v1/workspace/kill-switch', { active: true })).status).toBe(200);
      const denied = await stepIn(run.id, 5, { model: 'claude-sonnet-4' });
      expect(denied.body.status).toBe('BLOCKED');
      const items = (await ws.api.request('GET', '/v1/runs')).body.items;
      const byId = new Map(items.map((r: any) => [r.id, r.models]));
      expect(byId.get(run.id)).toEqual(['gpt-4o-mini', 'gpt-4o', 'claude-sonnet-4']);
      expect(byId.get(toolOnly.id)).toEqual([]);
    });

    it('when pagination is out of bounds, then 422 naming the parameter', async () => {
      for (const q of ['per_page=101', 'per_page=0', 'page=0', 'page=-1', 'per_page=abc', 'status=NOPE']) {
        const res = await api.request('GET', `/v1/runs?${q}`);
        expect(res.status, q).toBe(422);
        expect(res.body.errors[0].path).toBe(`query.${q.split('=')[0]}`);
      }
    });
  });

  describe('input and credentials', () => {
    it('when the credential is missing or wrong, then 401 with the contract body', async () => {
      const anonymous = await fetch(`${api.url}/v1/runs`);
      expect(anonymous.status).toBe(401);
      expect(await anonymous.json()).toEqual({ detail: expect.any(String), code: 'UNAUTHORIZED' });
      const [prefixPart] = api.apiKey.split('_').slice(1);
      for (const key of [`lg_${prefixPart}_${'x'.repeat(43)}`, 'lg_short_key', 'not-a-key', `${api.apiKey}x`]) {
        const res = await fetch(`${api.url}/v1/runs`, { headers: { authorization: `Bearer ${key}` } });
        expect(res.status, key).toBe(401);
      }
      expect((await api.request('GET', '/v1/runs')).status).toBe(200);
    });

    it('when bodies are malformed, then 400, 413, 415 or 422 as the contract says, and nothing is stored', async () => {
      const before = (await api.request('GET', '/v1/runs')).body.total;
      const cases: [unknown, number, Record<string, string>?][] = [
        ['{"user_id":', 400],
        [{}, 422],
        [{ user_id: 42 }, 422],
        [{ user_id: '' }, 422],
        [{ user_id: 'u', extra: true }, 422],
        [{ user_id: 'u', metadata: 'text' }, 422],
        [{ user_id: 'u', metadata: { big: 'x'.repeat(1_100_000) } }, 413],
        ['user_id=u', 415, { 'content-type': 'application/x-www-form-urlencoded' }],
        [{ user_id: 'nul\u0000byte' }, 422],
      ];
      for (const [body, status, headers] of cases) {
        const res = await api.request('POST', '/v1/runs', body, headers);
        expect(res.status, JSON.stringify(body).slice(0, 60)).toBe(status);
        expect(res.body).toMatchObject({ detail: expect.any(String), code: expect.any(String) });
      }
      const invalid = await api.request('POST', '/v1/runs', { user_id: 'u', extra: 1 });
      expect(invalid.body.errors).toEqual([{ path: 'body.extra', message: 'is not a known field' }]);
      const missing = await api.request('POST', '/v1/runs', {});
      expect(missing.body.errors).toEqual([{ path: 'body.user_id', message: expect.any(String) }]);
      expect((await api.request('GET', '/v1/runs')).body.total).toBe(before);
    });

    it('when step and update bodies break the schema, then 422', async () => {
      const run = await startRun();
      const stepCases = [
        { type: 'MODEL_CALL' },
        { type: 'NOPE', sequence: 1 },
        { type: 'INPUT', sequence: 0 },
        { type: 'INPUT', sequence: 1.5 },
        { type: 'INPUT', sequence: '1' },
        { type: 'INPUT', sequence: 1, input_data: [1, 2] },
      ];
      for (const body of stepCases)
        expect((await api.request('POST', `/v1/runs/${run.id}/steps`, body)).status).toBe(422);
      const s = await step(run.id, 1);
      const patchCases = [
        { status: 'ALLOWED' },
        { status: 'COMPLETED', prompt_tokens: -1 },
        { status: 'COMPLETED', completion_tokens: 1.5 },
        { status: 'COMPLETED', duration_ms: -5 },
        { status: 'COMPLETED', prompt_tokens: 2 ** 63 },
        { status: 'COMPLETED', cost_usd: 0 },
      ];
      for (const body of patchCases)
        expect((await finish(run.id, s.body.id, body)).status, JSON.stringify(body)).toBe(422);
      expect((await api.request('POST', `/v1/runs/not-a-uuid/end`, { status: 'COMPLETED' })).status).toBe(422);
      expect((await api.request('POST', `/v1/runs/${run.id}/end`, { status: 'RUNNING' })).status).toBe(422);
      expect((await finish(run.id, s.body.id, { status: 'COMPLETED' })).status).toBe(200);
    });

    it('when the kill switch is toggled on a plan without it, then 403', async () => {
      for (const plan of ['basic', 'pro'] as const) {
        const ws = await api.newWorkspace(plan);
        const res = await ws.api.request('POST', '/v1/workspace/kill-switch', { active: true });
        expect(res.status).toBe(403);
        expect(res.body.code).toBe('PLAN_REQUIRED');
      }
      const ok = await api.request('POST', '/v1/workspace/kill-switch', { active: false });
      expect(ok.body).toEqual({ active: false, updated_at: expect.stringMatching(/Z$/) });
    });
  });

  describe('idempotency', () => {
    it('when a start is retried with the same Idempotency-Key, then one run exists and the first answer is replayed', async () => {
      const ws = await freshWorkspace({ max_concurrent_runs: 10 });
      const headers = { 'idempotency-key': 'start-1' };
      const attempts = await Promise.all(
        Array.from({ length: 5 }, () => ws.api.request('POST', '/v1/runs', { user_id: 'u' }, headers)),
      );
      const ids = new Set(attempts.map((a) => a.body.id));
      expect(attempts.map((a) => a.status)).toEqual([201, 201, 201, 201, 201]);
      expect(ids.size).toBe(1);
      expect((await ws.api.request('GET', '/v1/runs')).body.total).toBe(1);
      expect((await ws.api.request('GET', '/v1/usage')).body).toMatchObject({ concurrent_runs: 1, monthly_runs: 1 });
      const reused = await ws.api.request('POST', '/v1/runs', { user_id: 'someone-else' }, headers);
      expect(reused.status).toBe(422);
      expect(reused.body.code).toBe('IDEMPOTENCY_KEY_REUSED');
    });

    it('when a step creation is retried with the same key, then one step exists', async () => {
      const run = await startRun();
      const headers = { 'idempotency-key': `step-${run.id}` };
      const [a, b] = await Promise.all([
        api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 1 }, headers),
        api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 1 }, headers),
      ]);
      expect([a.status, b.status]).toEqual([201, 201]);
      expect(a.body.id).toBe(b.body.id);
      expect((await api.request('GET', `/v1/runs/${run.id}`)).body.step_count).toBe(1);
    });

    it('when a step update or a run end is retried after a lost answer, then the first answer comes back, not a 409', async () => {
      const run = await startRun();
      const s = await step(run.id, 1);
      const patch = { 'idempotency-key': `patch-${s.body.id}` };
      const first = await finish(run.id, s.body.id, { status: 'COMPLETED', prompt_tokens: 3 });
      expect(first.status).toBe(200);
      const keyed = await api.request('PATCH', `/v1/runs/${run.id}/steps/${s.body.id}`, { status: 'FAILED' }, patch);
      expect(keyed.status).toBe(409); // no key on the first call: nothing to replay
      const s2 = await step(run.id, 2);
      const a = await api.request(
        'PATCH',
        `/v1/runs/${run.id}/steps/${s2.body.id}`,
        { status: 'COMPLETED' },
        { 'idempotency-key': 'p2' },
      );
      const b = await api.request(
        'PATCH',
        `/v1/runs/${run.id}/steps/${s2.body.id}`,
        { status: 'COMPLETED' },
        { 'idempotency-key': 'p2' },
      );
      expect([a.status, b.status]).toEqual([200, 200]);
      expect(b.body).toEqual(a.body);
      const end = { 'idempotency-key': `end-${run.id}` };
      const e1 = await api.request('POST', `/v1/runs/${run.id}/end`, { status: 'COMPLETED' }, end);
      const e2 = await api.request('POST', `/v1/runs/${run.id}/end`, { status: 'COMPLETED' }, end);
      expect([e1.status, e2.status]).toEqual([200, 200]);
      expect(e2.body).toEqual(e1.body);
      // The retry spells the ids otherwise: still the same request.
      const e3 = await api.request('POST', `/v1/runs/${run.id.toUpperCase()}/end`, { status: 'COMPLETED' }, end);
      expect(e3.status).toBe(200);
      expect(e3.body).toEqual(e1.body);
    });
  });

  it('serves /health and the OpenAPI document', async () => {
    const health = await fetch(`${api.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: 'ok', checks: { database: 'ok', counters: 'ok' } });
    const doc = (await (await fetch(`${api.url}/openapi.json`)).json()) as any;
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining(['/v1/runs', '/v1/runs/{run_id}/steps', '/v1/model-pricing/{model}']),
    );
  });
});
