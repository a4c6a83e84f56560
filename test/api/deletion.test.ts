/**
 * Deletion through real HTTP on Postgres (and the embedded backend): a pricing entry, an API key,
 * a workspace's retention and its purge, a user with their runs. Whatever is deleted, the counted
 * numbers (today's spend, this month's runs) stay, and the run list's kept counts stay right.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reconcile } from '../../src/jobs/reconcile.js';
import { countedWindowStart, purgeExpiredRuns } from '../../src/store/deletion.js';
import { createApiKey } from '../../src/store/workspaces.js';
import { caller, startTestApi, type Caller, type TestApi } from '../support/harness.js';

describe('counted window', () => {
  it("when it is early in a month, then the window starts yesterday; later, at the month's start (UTC)", () => {
    expect(countedWindowStart(new Date('2026-03-01T05:00:00Z')).toISOString()).toBe('2026-02-28T00:00:00.000Z');
    expect(countedWindowStart(new Date('2026-03-20T23:59:00Z')).toISOString()).toBe('2026-03-01T00:00:00.000Z');
  });
});

describe.each(['postgres+redis', 'embedded'] as const)('deletion on %s', (backend) => {
  let api: TestApi;
  let now = new Date('2026-01-05T12:00:00Z');
  const clock = { now: () => now };
  beforeAll(async () => {
    api = await startTestApi(backend, { clock });
  });
  afterAll(async () => {
    await api?.close();
  });

  /** A run of `userId` with one priced step (1 USD), ended unless `running`. */
  const recordRun = async (ws: Caller, userId: string, options: { running?: boolean } = {}) => {
    const run = await ws.request('POST', '/v1/runs', { user_id: userId });
    expect(run.status).toBe(201);
    const step = await ws.request('POST', `/v1/runs/${run.body.id}/steps`, {
      type: 'MODEL_CALL',
      sequence: 1,
      model: 'priced',
    });
    expect(step.status).toBe(201);
    await ws.request('PATCH', `/v1/runs/${run.body.id}/steps/${step.body.id}`, {
      status: 'COMPLETED',
      prompt_tokens: 1000,
      completion_tokens: 0,
    });
    if (!options.running)
      expect((await ws.request('POST', `/v1/runs/${run.body.id}/end`, { status: 'COMPLETED' })).status).toBe(200);
    return run.body.id as string;
  };
  const newWorkspace = async () => {
    const ws = await api.newWorkspace();
    await ws.api.request('PUT', '/v1/model-pricing/priced', { input_cost_per_token: 0.001, output_cost_per_token: 0 });
    return ws;
  };
  const sql = async (text: string, params: unknown[]) => (await api.stores.db.query(text, params)).rows;
  const stepsOf = async (ids: string[]) =>
    Number((await sql('SELECT count(*) AS n FROM steps WHERE run_id = ANY($1::uuid[])', [ids]))[0].n);
  /** The counters the guards read: every day's spend and runs of the workspace. */
  const usage = (workspaceId: string) =>
    sql('SELECT day::text, spend_micros::text, runs FROM usage_daily WHERE workspace_id = $1 ORDER BY day', [
      workspaceId,
    ]);
  /** The run list's total (run_counts) must equal the runs there are. */
  const expectCountsRight = async (ws: Caller, workspaceId: string) => {
    const [{ n }] = await sql('SELECT count(*) AS n FROM runs WHERE workspace_id = $1', [workspaceId]);
    expect((await ws.request('GET', '/v1/runs')).body.total).toBe(Number(n));
  };

  it("when a pricing entry is deleted, then it is gone, and deleting it again (or another workspace's) is a 404", async () => {
    const ws = await newWorkspace();
    const other = await newWorkspace();
    expect((await ws.api.request('DELETE', '/v1/model-pricing/priced')).status).toBe(204);
    expect((await ws.api.request('GET', '/v1/model-pricing')).body).toEqual([]);
    const again = await ws.api.request('DELETE', '/v1/model-pricing/priced');
    expect(again.status).toBe(404);
    expect(again.body).toEqual({
      code: 'PRICING_NOT_FOUND',
      detail: 'The workspace has no pricing entry for "priced".',
    });
    expect((await other.api.request('GET', '/v1/model-pricing')).body.map((p: any) => p.model)).toEqual(['priced']);
  });

  it('when a key is revoked, then it stops working; the last active key is refused with 409', async () => {
    const ws = await newWorkspace();
    const [first] = (await ws.api.request('GET', '/v1/api-keys')).body;
    const last = await ws.api.request('DELETE', `/v1/api-keys/${first.id}`);
    expect(last.status).toBe(409);
    expect(last.body.code).toBe('LAST_ACTIVE_KEY');
    expect(last.body.detail).toMatch(/last active API key.*npx runguard keys regenerate --yes/);

    const second = await createApiKey(api.stores.db, ws.workspaceId, 'second');
    const asSecond = caller(api.url, second.apiKey);
    expect((await asSecond.request('GET', '/v1/workspace')).status).toBe(200);
    expect((await ws.api.request('DELETE', `/v1/api-keys/${second.id.toUpperCase()}`)).status).toBe(204);
    expect((await asSecond.request('GET', '/v1/workspace')).status).toBe(401);
    const listed = (await ws.api.request('GET', '/v1/api-keys')).body;
    expect(listed.find((k: any) => k.id === second.id).revoked_at).toBe(now.toISOString());
    // Revoked already: nothing to change, and no error.
    expect((await ws.api.request('DELETE', `/v1/api-keys/${second.id}`)).status).toBe(204);
    // The workspace's own first key is still the last active one.
    expect((await ws.api.request('DELETE', `/v1/api-keys/${first.id}`)).status).toBe(409);

    const other = await newWorkspace();
    const foreign = await other.api.request('DELETE', `/v1/api-keys/${first.id}`);
    expect(foreign.status).toBe(404);
    expect(foreign.body.code).toBe('API_KEY_NOT_FOUND');
    expect((await ws.api.request('DELETE', '/v1/api-keys/not-a-uuid')).status).toBe(422);
  });

  it('when retention is set, then it is at least 35 days and the purge deletes ended runs past it, in batches', async () => {
    now = new Date('2026-01-05T12:00:00Z');
    const ws = await newWorkspace();
    const keep = await newWorkspace(); // no retention: keeps everything
    const old = [await recordRun(ws.api, 'u1'), await recordRun(ws.api, 'u2'), await recordRun(ws.api, 'u1')];
    const oldRunning = await recordRun(ws.api, 'u1', { running: true });
    const kept = await recordRun(keep.api, 'u1');

    expect((await ws.api.request('PATCH', '/v1/workspace', { retention_days: 34 })).status).toBe(422);
    expect((await ws.api.request('PATCH', '/v1/workspace', { retention_days: 1.5 })).status).toBe(422);
    const set = await ws.api.request('PATCH', '/v1/workspace', { retention_days: 35 });
    expect(set.status).toBe(200);
    expect(set.body.retention_days).toBe(35);
    expect((await keep.api.request('GET', '/v1/workspace')).body.retention_days).toBeNull();

    now = new Date('2026-03-02T08:00:00Z'); // 56 days later
    const recent = await recordRun(ws.api, 'u1');
    const usageBefore = await usage(ws.workspaceId);

    expect(await purgeExpiredRuns(api.stores.db, now, { batchSize: 2 })).toBe(3);
    const left = (await ws.api.request('GET', '/v1/runs')).body.items.map((r: any) => r.id).sort();
    expect(left).toEqual([oldRunning, recent].sort());
    expect(await stepsOf(old)).toBe(0);
    expect((await ws.api.request('GET', `/v1/runs/${old[0]}`)).status).toBe(404);
    expect((await keep.api.request('GET', `/v1/runs/${kept}`)).status).toBe(200);
    await expectCountsRight(ws.api, ws.workspaceId);
    await expectCountsRight(keep.api, keep.workspaceId);
    // The counters are not lowered, and today's and yesterday's agree with the records still.
    expect(await usage(ws.workspaceId)).toEqual(usageBefore);
    const report = await reconcile(api.stores.db, api.stores.counters, { now, days: 2, repair: false });
    expect(report.drifts.filter((d) => d.key.startsWith(ws.workspaceId))).toEqual([]);
    expect(await purgeExpiredRuns(api.stores.db, now)).toBe(0);

    expect((await ws.api.request('PATCH', '/v1/workspace', { retention_days: null })).body.retention_days).toBeNull();
  });

  it('when a user is deleted, then their record and ended runs go; runs in a counted window make it a 409', async () => {
    now = new Date('2026-01-05T12:00:00Z');
    const ws = await newWorkspace();
    const bobRuns = [await recordRun(ws.api, 'bob'), await recordRun(ws.api, 'bob')];
    await recordRun(ws.api, 'carol');
    await ws.api.request('PUT', '/v1/users/bob', { daily_budget_usd: 5 });

    now = new Date('2026-02-10T12:00:00Z');
    const carolThisMonth = await recordRun(ws.api, 'carol');
    await ws.api.request('PATCH', '/v1/workspace', { monthly_run_limit: 1 });
    const usageBefore = await usage(ws.workspaceId);

    const refused = await ws.api.request('DELETE', '/v1/users/carol');
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('USER_HAS_COUNTED_RUNS');
    expect(refused.body.detail).toMatch(/^carol has 1 run\(s\) RUNNING or inside a counted window/);
    expect((await ws.api.request('GET', `/v1/runs/${carolThisMonth}`)).status).toBe(200);
    // The month's run still counts: the limit of 1 denies the next run.
    expect((await ws.api.request('POST', '/v1/runs', { user_id: 'dave' })).body.status).toBe('BLOCKED');

    const deleted = await ws.api.request('DELETE', '/v1/users/bob');
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({ user_id: 'bob', runs_deleted: 2 });
    expect(await stepsOf(bobRuns)).toBe(0);
    expect((await ws.api.request('GET', '/v1/runs?user_id=bob')).body.total).toBe(0);
    const users = (await ws.api.request('GET', '/v1/users')).body.items.map((u: any) => u.user_id);
    expect(users).not.toContain('bob');
    expect(
      await sql('SELECT * FROM user_usage_daily WHERE workspace_id = $1 AND user_id = $2', [ws.workspaceId, 'bob']),
    ).toEqual([]);
    expect(await usage(ws.workspaceId)).toEqual(usageBefore);
    await expectCountsRight(ws.api, ws.workspaceId);

    const gone = await ws.api.request('DELETE', '/v1/users/bob');
    expect(gone.status).toBe(404);
    expect(gone.body.code).toBe('USER_NOT_FOUND');
  });
});
