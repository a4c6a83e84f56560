/**
 * `budget.threshold` for the budgets of `/v1/budgets` (issue #51, part 5): a soft (`alert`) budget
 * never denies and tells of its 50%, 80% and 100% once per window; deny budgets tell of theirs too.
 * Two daemons scanning at once (two pools on one Postgres) write each event once; a new window
 * (the workspace's local week, America/New_York) tells again; a crossing in a window's last
 * seconds is found after it ended. On Postgres and on the embedded database (one daemon by nature).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresDb, type Db } from '../../src/store/db.js';
import { purgeWebhookHistory } from '../../src/store/webhook-deliveries.js';
import { insertEndpoint } from '../../src/store/webhooks.js';
import { scanThresholds } from '../../src/webhooks/scans.js';
import { generateSecret } from '../../src/webhooks/signing.js';
import { caller, startTestApi, type Backend, type Caller, type TestApi } from '../support/harness.js';

const PPM = [500_000, 800_000, 1_000_000];

for (const backend of ['postgres+redis', 'embedded'] as Backend[]) {
  describe(`budget thresholds (${backend})`, () => {
    let api: TestApi;
    /** The second daemon's connections (the embedded database has one daemon: the same ones). */
    let other: Db;
    // Sunday 29 November 2026, noon in New York (EST, UTC-5); the ISO week ends at Monday's midnight.
    let now = new Date('2026-11-29T17:00:00Z');
    let sequence = 0;

    beforeAll(async () => {
      api = await startTestApi(backend, { clock: { now: () => now } });
      other = api.stores.databaseUrl ? postgresDb({ connectionString: api.stores.databaseUrl, max: 4 }) : api.stores.db;
      await insertEndpoint(
        api.stores.db,
        {
          workspaceId: api.workspaceId,
          url: 'https://hooks.example.com/budgets',
          description: null,
          format: 'standard',
          events: ['budget.threshold'],
          secret: generateSecret(),
        },
        new Date(),
      );
      expect((await api.request('PATCH', '/v1/workspace', { time_zone: 'America/New_York' })).status).toBe(200);
      expect(
        (await api.request('PUT', '/v1/model-pricing/m1', { input_cost_per_token: 0.001, output_cost_per_token: 0 }))
          .status,
      ).toBe(200);
    }, 180_000); // PGlite takes its time to open on a loaded machine
    afterAll(async () => {
      if (other !== api?.stores.db) await other?.close();
      await api?.close();
    });

    /** Both daemons scan at once, three times over: what a rescan or a race could duplicate. */
    async function scanTwice() {
      for (let i = 0; i < 3; i++) {
        await Promise.all([scanThresholds(api.stores.db, now, PPM), scanThresholds(other, now, PPM)]);
      }
    }

    const thresholds = async () =>
      (
        await api.stores.db.query<{ data: any }>(
          `SELECT data FROM webhook_events WHERE type = 'budget.threshold' ORDER BY seq`,
        )
      ).rows.map(({ data }) => [data.subject.id, data.window_start, data.threshold]);

    /** A completed model call of `usd` (1,000 prompt tokens a dollar) in a run of its own, made with `key`, tagged. */
    async function spend(user: string, usd: number, key: Caller = api, tags?: Record<string, string>) {
      const run = (await key.request('POST', '/v1/runs', { user_id: user, ...(tags && { tags }) })).body;
      expect(run.status).toBe('RUNNING');
      const step = (
        await key.request('POST', `/v1/runs/${run.id}/steps`, { type: 'MODEL_CALL', model: 'm1', sequence: ++sequence })
      ).body;
      expect(step.status).toBe('ALLOWED');
      const done = await key.request('PATCH', `/v1/runs/${run.id}/steps/${step.id}`, {
        status: 'COMPLETED',
        prompt_tokens: Math.round(usd * 1000),
      });
      expect(done.status).toBe(200);
      return step;
    }

    async function budget(body: Record<string, unknown>) {
      const created = await api.request('POST', '/v1/budgets', body);
      expect(created.status).toBe(201);
      return created.body as { id: string };
    }

    it('when an alert budget is spent past its limit through two daemons, then it never denies and each threshold is sent once', async () => {
      const ana = await budget({ scope: 'user', subject: 'ana', period: 'week', limit_usd: 1, action: 'alert' });
      await spend('ana', 0.3);
      await scanTwice();
      expect(await thresholds()).toEqual([]);

      await spend('ana', 0.3);
      await scanTwice();
      expect(await thresholds()).toEqual([['ana', '2026-11-23', 0.5]]);

      // 120% then 180% of the limit: allowed every time (spend() checks), 80% and 100% once each.
      const step = await spend('ana', 0.6);
      expect(step.decision).toMatchObject({ outcome: 'ALLOW', reason: null });
      expect(step.decision.evaluated_rules).not.toHaveProperty('budgets');
      await scanTwice();
      await spend('ana', 0.6);
      await scanTwice();
      expect(await thresholds()).toEqual([
        ['ana', '2026-11-23', 0.5],
        ['ana', '2026-11-23', 0.8],
        ['ana', '2026-11-23', 1],
      ]);
      expect((await api.request('GET', `/v1/budgets/${ana.id}`)).body).toMatchObject({ spend_usd: 1.8, limit_usd: 1 });

      const { rows } = await api.stores.db.query<{ data: any; deliveries: number }>(
        `SELECT e.data, (SELECT count(*)::int FROM webhook_deliveries d WHERE d.event_id = e.id) AS deliveries
         FROM webhook_events e WHERE e.type = 'budget.threshold' ORDER BY e.seq DESC LIMIT 1`,
      );
      expect(rows[0]).toEqual({
        deliveries: 1,
        data: {
          subject: { type: 'user', id: 'ana' },
          day: '2026-11-29',
          threshold: 1,
          spend_usd: 1.2,
          budget_usd: 1,
          budget_id: ana.id,
          scope: 'user',
          period: 'week',
          action: 'alert',
          window_start: '2026-11-23',
          resets_at: '2026-11-30T05:00:00Z',
        },
      });
    });

    it("when a crossing comes in a window's last seconds and a new week starts, then it is sent after midnight, and the new window's again", async () => {
      const before = (await thresholds()).length;
      await budget({ scope: 'user', subject: 'cy', period: 'week', limit_usd: 1, action: 'alert' });
      const workspace = await budget({ scope: 'workspace', period: 'month', limit_usd: 5, action: 'deny' });
      // 23:59:50 on Sunday in New York; no daemon scans before midnight.
      now = new Date('2026-11-30T04:59:50Z');
      await spend('cy', 0.6);
      // 00:00:05 on Monday: a new week for cy and ana, still November for the workspace.
      now = new Date('2026-11-30T05:00:05Z');
      await scanTwice();
      const late = (await thresholds()).slice(before);
      expect(late).toEqual([['cy', '2026-11-23', 0.5]]);
      const { rows } = await api.stores.db.query<{ data: any }>(
        `SELECT data FROM webhook_events WHERE type = 'budget.threshold' ORDER BY seq DESC LIMIT 1`,
      );
      expect(rows[0]!.data).toMatchObject({ day: '2026-11-29', resets_at: '2026-11-30T05:00:00Z' });

      // Monday: ana spends 60% of her limit again, in the new week; the workspace passes 50% of its
      // deny budget ($3 of $5 in November), told as the alert budgets are.
      await spend('ana', 0.6);
      await scanTwice();
      expect((await thresholds()).slice(before)).toEqual([
        ['cy', '2026-11-23', 0.5],
        [api.workspaceId, '2026-11-01', 0.5],
        ['ana', '2026-11-30', 0.5],
      ]);
      const { rows: last } = await api.stores.db.query<{ data: any }>(
        `SELECT data FROM webhook_events WHERE type = 'budget.threshold' ORDER BY seq DESC LIMIT 2`,
      );
      expect(last[1]!.data).toMatchObject({
        subject: { type: 'workspace', id: api.workspaceId },
        budget_id: workspace.id,
        scope: 'workspace',
        action: 'deny',
        spend_usd: 3,
        budget_usd: 5,
        resets_at: '2026-12-01T05:00:00Z',
      });

      // Later the same week: nothing new, however often both daemons scan.
      now = new Date('2026-12-02T15:00:00Z');
      await scanTwice();
      expect((await thresholds()).length).toBe(before + 3);
    });

    it("when a key's calls, or a tag's runs, cross their budgets, then the thresholds name the key and the tag", async () => {
      const before = (await thresholds()).length;
      const issued = await api.request('POST', '/v1/api-keys', { name: 'ci-bot', role: 'agent' });
      expect(issued.status).toBe(201);
      const bot = caller(api.url, issued.body.api_key);
      const capped = await budget({
        scope: 'key',
        subject: issued.body.id,
        period: 'day',
        limit_usd: 1,
        action: 'alert',
      });
      const tagged = await budget({ scope: 'tag', subject: 'project:search', period: 'month', limit_usd: 2 });
      await spend('bot-user', 0.9, bot);
      await spend('bot-user', 0.2); // another key's call: not the bot's
      await spend('bot-user', 1.1, api, { project: 'search' });
      await spend('bot-user', 0.2, api, { project: 'ads' }); // another tag's (the workspace's month: $2.40 of $5)
      await scanTwice();
      // 2 December in New York: 90% of the bot's day, 55% of search's month.
      expect((await thresholds()).slice(before)).toEqual([
        ['project:search', '2026-12-01', 0.5],
        [issued.body.id, '2026-12-02', 0.5],
        [issued.body.id, '2026-12-02', 0.8],
      ]);
      expect((await api.request('GET', `/v1/budgets/${tagged.id}`)).body).toMatchObject({ spend_usd: 1.1 });
      const { rows } = await api.stores.db.query<{ data: any }>(
        `SELECT data FROM webhook_events WHERE type = 'budget.threshold' ORDER BY seq DESC LIMIT 3`,
      );
      expect(rows[0]!.data).toMatchObject({
        subject: { type: 'key', id: issued.body.id },
        budget_id: capped.id,
        scope: 'key',
        spend_usd: 0.9,
      });
      expect(rows[2]!.data).toMatchObject({
        subject: { type: 'tag', id: 'project:search' },
        budget_id: tagged.id,
        scope: 'tag',
        action: 'deny',
        spend_usd: 1.1,
      });
    });

    it('when the history is purged before a month is over, then its threshold events stay, and no rescan sends them again', async () => {
      const count = async () => (await thresholds()).length;
      const before = await count();
      await api.stores.db.query(`UPDATE webhook_deliveries SET status = 'delivered', finished_at = $1`, [now]);
      // A retention of a day, 2 days after the events: the thresholds' keys must still hold.
      const later = new Date(now.getTime() + 2 * 86_400_000);
      await purgeWebhookHistory(api.stores.db, new Date(later.getTime() - 86_400_000), later);
      expect(await count()).toBe(before);
      await scanTwice();
      expect(await count()).toBe(before);
      // 40 days on, every window they stand for is over: they go.
      const gone = new Date(now.getTime() + 40 * 86_400_000);
      await purgeWebhookHistory(api.stores.db, new Date(gone.getTime() - 86_400_000), gone);
      expect(await count()).toBe(0);
    });
  });
}
