/**
 * Budgets of scope `tag` (issue #51, parts 3 and 4): a tag budget caps the spend of every run
 * carrying that pair, per day, week and month, on every backend; budgeted before the tag is first
 * seen; its counters rebuilt after a Redis flush and reconciled; and 50 steps racing through two
 * daemons in reserve mode never over the tag's budget.
 */
import { describe, expect, it } from 'vitest';
import { subjectOf } from '../../src/store/counters/counters.js';
import { MODEL, MODEL_CALL, PRICES, subjectSpendMicros, useBudgetsApi, WEDNESDAY } from '../support/budgets-api.js';
import { useDaemonPair } from '../support/daemon-pair.js';
import { BACKENDS, caller, type TestApi } from '../support/harness.js';

/** The recorded spend of a tag pair (all days), in microdollars. */
const tagSpendMicros = (api: TestApi, workspaceId: string, pair: string) =>
  subjectSpendMicros(api, workspaceId, subjectOf('tag', pair));

describe.each(BACKENDS)('tag budgets on %s', (backend) => {
  const fixture = useBudgetsApi(backend);
  const { workspace, spend } = fixture;

  it('when a tag budget names no pair or one out of bounds, then it is a 422 naming body.subject', async () => {
    const ws = await workspace();
    for (const subject of [
      undefined,
      null,
      'project',
      ':search',
      'Project:search',
      'project:',
      `p:${'v'.repeat(129)}`,
    ]) {
      const refused = await ws.api.request('POST', '/v1/budgets', {
        scope: 'tag',
        subject,
        period: 'day',
        limit_usd: 1,
      });
      expect(refused.status, String(subject)).toBe(422);
      expect(refused.body.errors.map((e: { path: string }) => e.path)).toEqual(['body.subject']);
    }
    // A value may hold a colon: the name ends at the first.
    const created = await ws.api.request('POST', '/v1/budgets', {
      scope: 'tag',
      subject: 'env:eu:west',
      period: 'day',
      limit_usd: 1,
    });
    expect(created.status).toBe(201);
  });

  it("when runs tagged with a pair spend, then the tag's day, week and month budgets deny them in turn, and other runs go on", async () => {
    fixture.now = WEDNESDAY;
    const ws = await workspace();
    // Budgeted before any run carries the tag.
    const budgets: Record<string, string> = {};
    for (const [period, limit_usd] of [
      ['day', 0.003],
      ['week', 0.005],
      ['month', 0.007],
    ] as const) {
      const created = await ws.api.request('POST', '/v1/budgets', {
        scope: 'tag',
        subject: 'project:search',
        period,
        limit_usd,
      });
      expect(created.status).toBe(201);
      budgets[period] = created.body.id;
    }
    const tagged = async (user: string, tags: Record<string, string>) =>
      (await ws.api.request('POST', '/v1/runs', { user_id: user, tags })).body;
    const first = await tagged('ana', { project: 'search', team: 'growth' });
    const second = await tagged('bob', { project: 'search' });
    const other = await tagged('ana', { project: 'ads' });
    // Wednesday: two runs of the tag spend $0.004 between them; the day's $0.003 is spent.
    expect((await spend(ws.api, first.id)).status).toBe('ALLOWED');
    expect((await spend(ws.api, second.id)).status).toBe('ALLOWED');
    expect((await spend(ws.api, first.id)).decision).toMatchObject({
      outcome: 'DENY',
      reason: 'BUDGET_EXCEEDED',
      detail: { budget_id: budgets.day, scope: 'tag', subject: 'project:search', period: 'day', spend_usd: 0.004 },
    });
    // A run of another value, and an untagged one, are not the tag's.
    expect((await spend(ws.api, other.id)).status).toBe('ALLOWED');
    expect((await spend(ws.api, (await tagged('ana', {})).id)).status).toBe('ALLOWED');
    // A new run carrying the tag is judged at its start.
    expect(await tagged('cy', { project: 'search' })).toMatchObject({
      status: 'BLOCKED',
      decision: { reason: 'BUDGET_EXCEEDED', detail: { scope: 'tag' } },
    });
    expect((await ws.api.request('GET', `/v1/budgets/${budgets.day}`)).body.spend_usd).toBe(0.004);

    // Thursday: the week holds $0.004 of $0.005.
    fixture.now = new Date('2026-11-26T06:00:00Z');
    await fixture.flushRedis();
    expect((await spend(ws.api, second.id)).status).toBe('ALLOWED');
    expect((await spend(ws.api, second.id)).decision.detail).toMatchObject({
      budget_id: budgets.week,
      spend_usd: 0.006,
    });

    // Next Monday: the month holds $0.006 of $0.007.
    fixture.now = new Date('2026-11-30T06:00:00Z');
    expect((await spend(ws.api, first.id)).status).toBe('ALLOWED');
    await fixture.flushRedis();
    expect((await spend(ws.api, first.id)).decision.detail).toMatchObject({
      budget_id: budgets.month,
      spend_usd: 0.008,
    });
    expect(await tagSpendMicros(fixture.api, ws.workspaceId, 'project:search')).toBe(8_000);
    expect(await tagSpendMicros(fixture.api, ws.workspaceId, 'team:growth')).toBe(4_000);
  });

  it('when the tag records drift, then reconcile finds and repairs them', async () => {
    fixture.now = WEDNESDAY;
    const ws = await workspace();
    const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'ana', tags: { project: 'search' } })).body;
    expect((await spend(ws.api, run.id)).status).toBe('ALLOWED');
    await fixture.api.stores.db.query(`UPDATE subject_usage_daily SET spend_micros = 7 WHERE workspace_id = $1`, [
      ws.workspaceId,
    ]);
    const report = await fixture.reconcile({ repair: true });
    expect(report.drifts).toContainEqual({
      kind: 'subject_usage',
      key: `${ws.workspaceId}/tag:project:search/2026-11-25`,
      expected: 'spend=2000',
      found: 'spend=7',
    });
    expect(await tagSpendMicros(fixture.api, ws.workspaceId, 'project:search')).toBe(2_000);
    // The subjects' copies were checked and repaired with a scope of no user: none was written.
    expect(await fixture.countersOfNoUser(ws.workspaceId)).toEqual([]);
    const again = await fixture.reconcile({ repair: false });
    expect(again.drifts.filter((drift) => drift.key.startsWith(ws.workspaceId))).toEqual([]);
  });
});

describe.each(['postgres+redis', 'postgres+sql'] as const)(
  'a tag budget in reserve mode with two daemons on %s',
  (backend) => {
    const pair = useDaemonPair(backend);

    it("when 50 steps of the tag's runs race through two daemons, then the tag spends within its budget", async () => {
      const BUDGET_MICROS = 10_000;
      const ws = await pair.a.newWorkspace('scale');
      expect((await ws.api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
      expect((await ws.api.request('PATCH', '/v1/workspace', { budget_mode: 'reserve' })).status).toBe(200);
      const created = await ws.api.request('POST', '/v1/budgets', {
        scope: 'tag',
        subject: 'project:search',
        period: 'week',
        limit_usd: BUDGET_MICROS / 1e6,
      });
      expect(created.status).toBe(201);
      const daemons = [caller(pair.a.url, ws.apiKey), caller(pair.b.url, ws.apiKey)];
      const runs: string[] = [];
      for (let i = 0; i < 10; i++)
        runs.push(
          (await ws.api.request('POST', '/v1/runs', { user_id: `u${i}`, tags: { project: 'search' } })).body.id,
        );
      const answers = await Promise.all(
        Array.from({ length: 50 }, async (_, i) => {
          const via = daemons[i % 2]!;
          const runId = runs[i % runs.length]!;
          // Each reserves $0.002 and costs $0.0015 (100 prompt and 12.5 completion tokens' worth).
          const step = (
            await via.request('POST', `/v1/runs/${runId}/steps`, {
              ...MODEL_CALL,
              sequence: Math.floor(i / runs.length) + 1,
              max_cost_usd: 0.002,
            })
          ).body;
          if (step.status === 'ALLOWED')
            await via.request('PATCH', `/v1/runs/${runId}/steps/${step.id}`, {
              status: 'COMPLETED',
              prompt_tokens: 110,
              completion_tokens: 10,
            });
          return { status: step.status as string, reason: step.decision?.reason as string | null };
        }),
      );
      const allowed = answers.filter((answer) => answer.status === 'ALLOWED').length;
      expect(answers.filter((answer) => answer.status !== 'ALLOWED')).toEqual(
        Array(50 - allowed).fill({ status: 'BLOCKED', reason: 'BUDGET_EXCEEDED' }),
      );
      expect(allowed).toBeGreaterThan(0);
      expect(allowed).toBeLessThan(50);
      const spent = await tagSpendMicros(pair.a, ws.workspaceId, 'project:search');
      expect(spent).toBe(allowed * 1_500);
      expect(spent).toBeLessThanOrEqual(BUDGET_MICROS);
    }, 60_000);
  },
);
