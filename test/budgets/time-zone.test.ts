/**
 * A workspace's time zone (issue #51, part 2): its days and months start at local midnight, for
 * the seed's daily budgets, the monthly run limit and the usage report. On every backend, with a
 * test clock moved across Asia/Kolkata's midnight (UTC+05:30) and New York's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, startTestApi, type Caller, type TestApi } from '../support/harness.js';

const MODEL = 'gpt-4o-mini';
const PRICES = { input_cost_per_token: 0.00001, output_cost_per_token: 0.00004 };
const call = { type: 'MODEL_CALL', model: MODEL, tool_name: null };

describe.each(BACKENDS)('time zones on %s', (backend) => {
  let api: TestApi;
  let now = new Date('2026-11-30T17:00:00Z');

  beforeAll(async () => {
    api = await startTestApi(backend, { clock: { now: () => now } });
  });
  afterAll(async () => {
    await api?.close();
  });

  let sequence = 0;
  /** A step of $0.002 (100 prompt and 25 completion tokens), allowed or not. */
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

  it('when the time zone is unknown, then the PATCH is a 422 naming the field, and a known one is kept', async () => {
    const ws = (await api.newWorkspace()).api;
    const bad = await ws.request('PATCH', '/v1/workspace', { time_zone: 'Mars/Olympus_Mons' });
    expect(bad.status).toBe(422);
    expect(bad.body.code).toBe('VALIDATION_FAILED');
    expect(bad.body.errors).toEqual([expect.objectContaining({ path: 'body.time_zone' })]);
    expect((await ws.request('GET', '/v1/workspace')).body.time_zone).toBe('UTC');
    const good = await ws.request('PATCH', '/v1/workspace', { time_zone: 'Asia/Kolkata' });
    expect(good.status).toBe(200);
    expect(good.body.time_zone).toBe('Asia/Kolkata');
  });

  it("when Kolkata's midnight passes (18:30Z), then the daily budget, the month's runs and the usage day start again", async () => {
    now = new Date('2026-11-30T17:00:00Z');
    const ws = (await api.newWorkspace()).api;
    expect((await ws.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
    expect(
      (await ws.request('PATCH', '/v1/workspace', { time_zone: 'Asia/Kolkata', daily_budget_usd: 0.002 })).status,
    ).toBe(200);
    const run = (await ws.request('POST', '/v1/runs', { user_id: 'kolkata' })).body;
    expect(run.status).toBe('RUNNING');
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
    const usage = (await ws.request('GET', '/v1/usage')).body;
    expect(usage).toMatchObject({ date: '2026-11-30', workspace_daily_spend_usd: 0.002, monthly_runs: 1 });

    // 23:59 in Kolkata: still the 30th, the budget spent.
    now = new Date('2026-11-30T18:29:00Z');
    const denied = await spend(ws, run.id);
    expect(denied.decision).toMatchObject({
      reason: 'WORKSPACE_DAILY_BUDGET_EXCEEDED',
      detail: { spend_usd: 0.002, budget_usd: 0.002, resets_at: '2026-11-30T18:30:00Z' },
    });

    // 00:00 on 1 December in Kolkata (still the 30th in UTC): a new day and a new month.
    now = new Date('2026-11-30T18:30:00Z');
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
    const next = (await ws.request('GET', '/v1/usage')).body;
    expect(next).toMatchObject({ date: '2026-12-01', workspace_daily_spend_usd: 0.002, monthly_runs: 0 });
    expect(next.daily.slice(-2)).toEqual([
      { date: '2026-11-30', spend_usd: 0.002, runs: 1 },
      { date: '2026-12-01', spend_usd: 0.002, runs: 0 },
    ]);
  });

  it("when New York's clocks go back (1 November 2026), then that 25-hour day is one day and the next starts at 05:00Z", async () => {
    now = new Date('2026-11-01T04:30:00Z');
    const ws = (await api.newWorkspace()).api;
    expect((await ws.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
    expect(
      (await ws.request('PATCH', '/v1/workspace', { time_zone: 'America/New_York', user_daily_budget_usd: 0.002 }))
        .status,
    ).toBe(200);
    const run = (await ws.request('POST', '/v1/runs', { user_id: 'nyc' })).body;
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
    // 24 hours later it is 23:30 local, still 1 November.
    now = new Date('2026-11-02T04:30:00Z');
    expect((await spend(ws, run.id)).decision).toMatchObject({
      reason: 'USER_DAILY_BUDGET_EXCEEDED',
      detail: { resets_at: '2026-11-02T05:00:00Z' },
    });
    now = new Date('2026-11-02T05:00:00Z');
    expect((await spend(ws, run.id)).status).toBe('ALLOWED');
  });

  it('when the zone changes after decisions, then the very next decision counts in the new zone', async () => {
    now = new Date('2026-11-30T19:00:00Z');
    const ws = (await api.newWorkspace()).api;
    await ws.request('PATCH', '/v1/workspace', { daily_budget_usd: 0 });
    const utc = (await ws.request('POST', '/v1/runs', { user_id: 'mover' })).body;
    expect(utc.decision.detail.resets_at).toBe('2026-12-01T00:00:00Z');
    expect((await ws.request('PATCH', '/v1/workspace', { time_zone: 'Asia/Kolkata' })).status).toBe(200);
    const kolkata = (await ws.request('POST', '/v1/runs', { user_id: 'mover' })).body;
    expect(kolkata.decision.detail.resets_at).toBe('2026-12-01T18:30:00Z');
  });
});
