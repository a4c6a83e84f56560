/**
 * The events the service door writes, in the transaction of the change (a refused change writes
 * none), and the ones found by scanning: on every backend, the embedded one included.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertEndpoint } from '../../src/store/webhooks.js';
import { scanFailedRuns, scanThresholds } from '../../src/webhooks/scans.js';
import { generateSecret } from '../../src/webhooks/signing.js';
import { startTestApi, type Backend, type TestApi } from '../support/harness.js';

for (const backend of ['postgres+redis', 'embedded'] as Backend[]) {
  describe(`webhook events (${backend})`, () => {
    let api: TestApi;
    const events = async (type?: string) =>
      (
        await api.stores.db.query<{ type: string; data: any }>(
          `SELECT type, data FROM webhook_events WHERE $1::text IS NULL OR type = $1 ORDER BY seq`,
          [type ?? null],
        )
      ).rows;

    beforeAll(async () => {
      api = await startTestApi(backend);
      await insertEndpoint(
        api.stores.db,
        {
          workspaceId: api.workspaceId,
          url: 'https://hooks.example.com/x',
          description: null,
          format: 'standard',
          events: [
            'settings.changed',
            'kill_switch.changed',
            'user.blocked',
            'user.unblocked',
            'run.failed',
            'budget.threshold',
          ],
          secret: generateSecret(),
        },
        new Date(),
      );
    }, 180_000); // PGlite takes its time to open on a loaded machine
    afterAll(async () => {
      await api?.close();
    });

    it('when settings, the kill switch, a block or a price change, then each change writes its event with who, before and after', async () => {
      await api.request('PATCH', '/v1/workspace', { daily_budget_usd: 10, max_concurrent_runs: 7 });
      await api.request('PATCH', '/v1/workspace', { daily_budget_usd: 10 }); // no change: no event
      await api.request('POST', '/v1/workspace/kill-switch', { active: true });
      await api.request('POST', '/v1/workspace/kill-switch', { active: true }); // already on: no event
      await api.request('PUT', '/v1/users/eve', { blocked: true });
      await api.request('PUT', '/v1/users/eve', { blocked: false, daily_budget_usd: 2 });
      await api.request('PUT', '/v1/model-pricing/m1', { input_cost_per_token: 0.001, output_cost_per_token: 0.002 });
      const actor = { type: 'api_key', id: expect.any(String) };
      expect(await events()).toEqual([
        {
          type: 'settings.changed',
          data: {
            actor,
            subject: { type: 'workspace', id: api.workspaceId },
            changes: { daily_budget_usd: { before: null, after: 10 }, max_concurrent_runs: { before: 100, after: 7 } },
          },
        },
        { type: 'kill_switch.changed', data: { actor, active: true, before: false } },
        { type: 'user.blocked', data: { actor, user_id: 'eve' } },
        { type: 'user.unblocked', data: { actor, user_id: 'eve' } },
        {
          type: 'settings.changed',
          data: {
            actor,
            subject: { type: 'user', id: 'eve' },
            changes: { daily_budget_usd: { before: null, after: 2 } },
          },
        },
        {
          type: 'settings.changed',
          data: {
            actor,
            subject: { type: 'model_pricing', id: 'm1' },
            changes: {
              input_cost_per_token: { before: null, after: 0.001 },
              output_cost_per_token: { before: null, after: 0.002 },
              is_active: { before: null, after: true },
            },
          },
        },
      ]);
      const { rows } = await api.stores.db.query<{ n: number }>('SELECT count(*)::int AS n FROM webhook_deliveries');
      expect(rows[0]!.n).toBe(6);
      await api.request('POST', '/v1/workspace/kill-switch', { active: false });
    });

    it('when catalog prices are imported, then one event lists the models it changed; a dry run writes none', async () => {
      const before = (await events('settings.changed')).length;
      const models = [
        { model: 'cat-a', input_cost_per_token: 0.000001, output_cost_per_token: 0.000002 },
        { model: 'cat-b', input_cost_per_token: 0.000003, output_cost_per_token: 0.000004 },
      ];
      expect((await api.request('POST', '/v1/model-pricing/import', { models, dry_run: true })).status).toBe(200);
      expect((await events('settings.changed')).length).toBe(before);
      expect((await api.request('POST', '/v1/model-pricing/import', { models })).status).toBe(200);
      const imported = (await events('settings.changed')).slice(before);
      expect(imported).toHaveLength(1);
      expect(imported[0]!.data.subject).toEqual({ type: 'model_pricing', id: null });
      expect(Object.keys(imported[0]!.data.changes).sort()).toEqual(['cat-a', 'cat-b']);
      expect(imported[0]!.data.changes['cat-a']).toMatchObject({
        before: null,
        after: { input_cost_per_token: 0.000001 },
      });
    });

    it('when a change is refused, then no event is written', async () => {
      const before = (await events()).length;
      const refused = await api.request('PATCH', '/v1/workspace', {
        daily_budget_usd: 3,
        monthly_run_limit: 999_999_999,
      });
      expect(refused.status).toBe(403);
      expect((await events()).length).toBe(before);
      expect((await api.request('GET', '/v1/workspace')).body.daily_budget_usd).toBe(10);
    });

    it('when a run fails and spend crosses a threshold, then the scans write each event once, however often they run', async () => {
      await api.request('PUT', '/v1/model-pricing/m1', { input_cost_per_token: 0.001, output_cost_per_token: 0 });
      const run = (await api.request('POST', '/v1/runs', { user_id: 'bob' })).body;
      const step = (
        await api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'MODEL_CALL', model: 'm1', sequence: 1 })
      ).body;
      await api.request('PATCH', `/v1/runs/${run.id}/steps/${step.id}`, { status: 'COMPLETED', prompt_tokens: 8_500 }); // $8.50
      expect((await api.request('POST', `/v1/runs/${run.id}/end`, { status: 'FAILED' })).status).toBe(200);
      const later = new Date(Date.now() + 5_000);
      for (let i = 0; i < 3; i++) {
        await scanThresholds(api.stores.db, later, [500_000, 800_000, 1_000_000]);
        await scanFailedRuns(api.stores.db, later);
      }
      expect(
        (await events('budget.threshold')).map((e) => [e.data.subject.type, e.data.threshold, e.data.spend_usd]),
      ).toEqual([
        ['workspace', 0.5, 8.5],
        ['workspace', 0.8, 8.5],
      ]);
      expect(await events('run.failed')).toEqual([
        {
          type: 'run.failed',
          data: expect.objectContaining({
            run_id: run.id,
            user_id: 'bob',
            step_count: 1,
            total_tokens: 8_500,
            total_cost_usd: 8.5,
          }),
        },
      ]);
    });
  });
}
