/**
 * Webhooks end to end: two real daemons on one Postgres and one Redis, a real receiver on
 * loopback (allowed by configuration), signatures checked by the receiver's own verifier.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { runCli } from '../support/daemon.js';
import { startDaemonProcess, type DaemonProcess } from '../support/daemon-process.js';
import { startReceiver, type Receiver } from '../support/webhook-receiver.js';

const ENV = {
  RUNGUARD_WEBHOOK_ALLOW_PRIVATE: 'true',
  RUNGUARD_WEBHOOK_POLL_INTERVAL_MS: '100',
  RUNGUARD_WEBHOOK_SCAN_INTERVAL_MS: '200',
  RUNGUARD_WEBHOOK_RETRY_BASE_MS: '100',
  RUNGUARD_WEBHOOK_TIMEOUT_MS: '1000',
  RUNGUARD_WEBHOOK_DENIAL_WINDOW_MS: '2000',
  // A window is counted this long after it ends (10 s by default), for the denials still committing:
  // a storm's take over 2 s on a loaded machine (a load of 10), and one committed later is not counted.
  RUNGUARD_WEBHOOK_DENIAL_SETTLE_MS: '5000',
};

describe('webhooks across two daemons', () => {
  let a: DaemonProcess;
  let b: DaemonProcess;
  let receiver: Receiver;
  let sql: pg.Client;

  /** An endpoint at its own path of the receiver, its secret handed to the receiver's verifier. */
  async function endpoint(path: string, body: Record<string, unknown> = {}) {
    const created = await a.request('POST', '/v1/webhooks', { url: `${receiver.url}${path}`, ...body });
    expect(created.status).toBe(201);
    expect(created.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    receiver.secrets.set(path, created.body.secret);
    return created.body as { id: string; secret: string };
  }

  beforeAll(async () => {
    receiver = await startReceiver();
    // Daemons open slowly on a loaded machine: give each start a minute.
    a = await startDaemonProcess({ env: ENV, startTimeoutMs: 60_000 });
    b = await startDaemonProcess({ sharing: a, env: ENV, startTimeoutMs: 60_000 });
    sql = new pg.Client({ connectionString: a.databaseUrl });
    await sql.connect();
  });
  afterAll(async () => {
    await sql?.end();
    await b?.close();
    await a?.close();
    await receiver?.close();
  });

  it('when an agent spends through both daemons past 50%, 80% and 100% of a $10 budget, then each threshold arrives once, signed', async () => {
    const hook = await endpoint('/budget', { events: ['budget.threshold'] });
    expect(
      (await a.request('PUT', '/v1/model-pricing/m1', { input_cost_per_token: 0.001, output_cost_per_token: 0 }))
        .status,
    ).toBe(200);
    expect((await a.request('PATCH', '/v1/workspace', { daily_budget_usd: 10, user_daily_budget_usd: 8 })).status).toBe(
      200,
    );
    // Steps of $0.50, alternately through each daemon: alice until her own $8 denies her, then bob
    // until the workspace's $10 does.
    for (const user of ['alice', 'bob']) {
      const run = (await a.request('POST', '/v1/runs', { user_id: user })).body;
      for (let sequence = 1; sequence <= 30; sequence++) {
        const daemon = sequence % 2 ? a : b;
        const step = (
          await daemon.request('POST', `/v1/runs/${run.id}/steps`, { type: 'MODEL_CALL', model: 'm1', sequence })
        ).body;
        if (step.status !== 'ALLOWED') break;
        expect(
          (
            await daemon.request('PATCH', `/v1/runs/${run.id}/steps/${step.id}`, {
              status: 'COMPLETED',
              prompt_tokens: 500,
            })
          ).status,
        ).toBe(200);
      }
    }
    const isWorkspace = (r: { json: any }) =>
      r.json.type === 'budget.threshold' && r.json.data.subject.type === 'workspace';
    await receiver.waitFor((u) => u.filter(isWorkspace).length >= 3);
    // Both daemons scan every 200 ms: give them several rounds to send a duplicate, should they.
    await sleep(1_500);
    const events = receiver.unique().filter((r) => r.json.type === 'budget.threshold');
    const workspace = events.filter(isWorkspace).map((r) => r.json.data);
    expect(workspace.map((d) => d.threshold)).toEqual([0.5, 0.8, 1]);
    expect(workspace.every((d) => d.budget_usd === 10 && d.spend_usd >= d.threshold * 10)).toBe(true);
    // alice's $8: all three of hers; bob's $2 of $8 crosses none.
    expect(
      events
        .filter((r) => r.json.data.subject.type === 'user')
        .map((r) => [r.json.data.subject.id, r.json.data.threshold]),
    ).toEqual([
      ['alice', 0.5],
      ['alice', 0.8],
      ['alice', 1],
    ]);
    // Each event once: however many times it was sent, it exists once, and each request verified.
    const { rows } = await sql.query(`SELECT count(*)::int AS n FROM webhook_events WHERE type = 'budget.threshold'`);
    expect(rows[0].n).toBe(6);
    const all = receiver.received.filter((r) => r.json?.type === 'budget.threshold');
    expect(new Set(all.map((r) => r.id)).size).toBe(6);
    expect(all.every((r) => r.verified)).toBe(true);
    expect(hook.id).toBeTruthy();
    await a.request('PATCH', '/v1/workspace', { daily_budget_usd: null, user_daily_budget_usd: null });
  });

  it('when a soft (alert) budget is spent past its limit through both daemons, then nothing is denied and each threshold arrives once', async () => {
    await endpoint('/soft', { events: ['budget.threshold'] });
    const budget = await a.request('POST', '/v1/budgets', {
      scope: 'user',
      subject: 'dora',
      period: 'week',
      limit_usd: 3,
      action: 'alert',
    });
    expect(budget.status).toBe(201);
    // Eight steps of $0.50, alternately through each daemon: $4, a third past the limit, all allowed.
    const run = (await a.request('POST', '/v1/runs', { user_id: 'dora' })).body;
    for (let sequence = 1; sequence <= 8; sequence++) {
      const daemon = sequence % 2 ? a : b;
      const step = (
        await daemon.request('POST', `/v1/runs/${run.id}/steps`, { type: 'MODEL_CALL', model: 'm1', sequence })
      ).body;
      expect(step.status).toBe('ALLOWED');
      expect(
        (
          await daemon.request('PATCH', `/v1/runs/${run.id}/steps/${step.id}`, {
            status: 'COMPLETED',
            prompt_tokens: 500,
          })
        ).status,
      ).toBe(200);
    }
    // The /budget endpoint of the first test gets the same events (same ids): count this endpoint's.
    const soft = () => {
      const seen = new Set<string>();
      return receiver.received.filter(
        (r) => r.path === '/soft' && r.json?.data?.budget_id === budget.body.id && !seen.has(r.id) && seen.add(r.id),
      );
    };
    await receiver.waitFor(() => soft().length >= 3);
    // Both daemons scan every 200 ms: give them several rounds to send a duplicate, should they.
    await sleep(1_500);
    expect(soft().map((r) => [r.json.data.threshold, r.json.data.action, r.json.data.period])).toEqual([
      [0.5, 'alert', 'week'],
      [0.8, 'alert', 'week'],
      [1, 'alert', 'week'],
    ]);
    expect(soft().every((r) => r.json.data.subject.id === 'dora' && r.json.data.budget_usd === 3)).toBe(true);
    const { rows } = await sql.query(`SELECT count(*)::int AS n FROM webhook_events WHERE data->>'budget_id' = $1`, [
      budget.body.id,
    ]);
    expect(rows[0].n).toBe(3);
    expect((await a.request('DELETE', `/v1/budgets/${budget.body.id}`)).status).toBe(204);
  });

  it('when the receiver is down for a while, then it gets every event afterwards, in order, each verified; the log shows the failures', async () => {
    receiver.mode = { status: 503, headers: { 'retry-after': '1' } };
    const hook = await endpoint('/ordered', { events: ['user.blocked'] });
    for (let i = 1; i <= 20; i++) {
      expect((await (i % 2 ? a : b).request('PUT', `/v1/users/u${i}`, { blocked: true })).status).toBe(200);
    }
    // Down long enough for the first delivery to be tried and refused twice.
    for (let tries = 0; ; tries++) {
      const { rows } = await sql.query('SELECT max(attempts) AS n FROM webhook_deliveries WHERE endpoint_id = $1', [
        hook.id,
      ]);
      if (Number(rows[0].n) >= 2) break;
      if (tries > 300) throw new Error('the first delivery was not retried');
      await sleep(50);
    }
    expect(receiver.unique().filter((r) => r.path === '/ordered')).toEqual([]);
    receiver.mode = { status: 200 };
    await receiver.waitFor((u) => u.filter((r) => r.path === '/ordered').length >= 20);
    const got = receiver.unique().filter((r) => r.path === '/ordered');
    expect(got.map((r) => r.json.data.user_id)).toEqual(Array.from({ length: 20 }, (_, i) => `u${i + 1}`));
    expect(got.every((r) => r.json.type === 'user.blocked' && r.json.data.actor.type === 'api_key')).toBe(true);
    expect(receiver.received.filter((r) => r.path === '/ordered').every((r) => r.verified)).toBe(true);

    // The receiver has them all; the daemon records the last one's answer right after it: read the
    // log once that is written (a read at once found it pending on a loaded machine).
    const deliveries = async () => (await a.request('GET', `/v1/webhooks/${hook.id}/deliveries?per_page=100`)).body;
    let log = await deliveries();
    for (const deadline = Date.now() + 30_000; log.items.some((d: any) => d.status === 'pending');) {
      if (Date.now() > deadline) throw new Error(`deliveries still pending: ${JSON.stringify(log.items)}`);
      await sleep(50);
      log = await deliveries();
    }
    expect(log.total).toBe(20);
    expect(log.items.every((d: any) => d.status === 'delivered')).toBe(true);
    const first = log.items.find((d: any) => d.event_id === got[0]!.id);
    expect(first.attempt_log.slice(0, 2).map((x: any) => x.status_code)).toEqual([503, 503]);
    expect(first.attempt_log.at(-1).status_code).toBe(200);

    // A replay sends the same event (same webhook-id) again; a ping is signed like any event.
    const sends = () => receiver.received.filter((r) => r.id === got[0]!.id).length;
    const sentBefore = sends();
    const replay = await a.request('POST', `/v1/webhooks/${hook.id}/deliveries/${first.id}/replay`);
    expect(replay.status).toBe(202);
    await receiver.waitFor(() => sends() > sentBefore);
    const ping = await b.request('POST', `/v1/webhooks/${hook.id}/test`);
    expect(ping.body).toMatchObject({ ok: true, status_code: 200, error: null });
    const pinged = receiver.received.find((r) => r.id === ping.body.event_id)!;
    expect(pinged).toMatchObject({ path: '/ordered', verified: true });
    expect(pinged.json.type).toBe('webhook.test');
  });

  it('when a storm of denials hits, then a few aggregated guard.denied events carry the counts', async () => {
    await endpoint('/denials', { events: ['guard.denied'] });
    await a.request('PUT', '/v1/users/mallory', { blocked: true });
    const starts = (n: number, user: (i: number) => string) =>
      Promise.all(
        Array.from({ length: n }, (_, i) => (i % 2 ? a : b).request('POST', '/v1/runs', { user_id: user(i) })),
      );
    // The storm's windows: however long it takes on a loaded machine, each window it spans holds
    // at most two events per subject and reason (its first denial, then its count).
    const windowOf = (at: number) => Math.floor(at / Number(ENV.RUNGUARD_WEBHOOK_DENIAL_WINDOW_MS));
    const stormStart = Date.now();
    // The answers that are not the expected denial, whole: a failure says what they were instead.
    const otherThan = (reason: string, answers: { status: number; body: any }[]) =>
      answers.filter((r) => r.body.decision?.reason !== reason).map((r) => ({ status: r.status, body: r.body }));
    expect(otherThan('USER_BLOCKED', await starts(60, () => 'mallory'))).toEqual([]);
    await a.request('POST', '/v1/workspace/kill-switch', { active: true });
    expect(otherThan('KILL_SWITCH_ACTIVE', await starts(150, (i) => `s${i % 3}`))).toEqual([]);
    const stormWindows = windowOf(Date.now()) - windowOf(stormStart) + 1;
    await a.request('POST', '/v1/workspace/kill-switch', { active: false });
    const denials = (reason: string) =>
      receiver
        .unique()
        .filter((r) => r.path === '/denials' && r.json.data.reason === reason)
        .map((r) => r.json.data);
    // A window's first denial of a subject and reason is sent at once; its count, when there were
    // more, once it has ended (and counts that first one too).
    const total = (reason: string) => {
      const perWindow = new Map<string, number>();
      for (const d of denials(reason)) {
        if (!d.first || !perWindow.has(d.window_start)) perWindow.set(d.window_start, d.count);
      }
      return [...perWindow.values()].reduce((sum, n) => sum + n, 0);
    };
    // Each window is counted once it has ended and settled (5 s here).
    await receiver.waitFor(() => total('USER_BLOCKED') === 60 && total('KILL_SWITCH_ACTIVE') === 150, 60_000);
    // 2 s windows: a handful of events for 210 denials, never one per denial.
    for (const [reason, subject] of [
      ['USER_BLOCKED', { type: 'user', id: 'mallory' }],
      ['KILL_SWITCH_ACTIVE', { type: 'workspace', id: expect.any(String) }],
    ] as const) {
      const events = denials(reason);
      expect(events.length).toBeLessThanOrEqual(2 * stormWindows);
      expect(events.every((d) => expect.objectContaining({ subject }).asymmetricMatch(d))).toBe(true);
      for (const first of [true, false]) {
        const some = events.filter((d) => d.first === first);
        expect(new Set(some.map((d) => d.window_start)).size).toBe(some.length);
      }
    }
    const windows = denials('KILL_SWITCH_ACTIVE');
    const counted = windows.filter(
      (d) => !d.first || !windows.some((w) => !w.first && w.window_start === d.window_start),
    );
    expect(counted.reduce((n, d) => n + d.run_starts, 0)).toBe(150);
  }, 90_000);

  it(
    'when an operator manages endpoints from the CLI, then create shows the secret once and test, deliveries and delete work',
    // Nine CLI processes (six one after another): each takes seconds to start on a loaded machine
    // (34 s at a load of 25, over 60 s at 38).
    { timeout: 180_000 },
    async () => {
      const cli = (...args: string[]) => runCli(args, { RUNGUARD_URL: a.url, RUNGUARD_API_KEY: a.apiKey });
      const created = await cli(
        'webhooks',
        'create',
        `${receiver.url}/cli`,
        '--events',
        'kill_switch.changed',
        '--format',
        'slack',
      );
      expect(created.code).toBe(0);
      const [, id] = /Created webhook (\S+) ->/.exec(created.stdout)!;
      const [, secret] = /Signing secret \(shown only now\): (whsec_\S+)/.exec(created.stdout)!;
      receiver.secrets.set('/cli', secret!);
      // The lists only read: they run beside the ping.
      const [list, listJson, test] = await Promise.all([
        cli('webhooks', 'list'),
        cli('webhooks', 'list', '--json'),
        cli('webhooks', 'test', id!),
      ]);
      expect(list.stdout).toContain(`${receiver.url}/cli`);
      expect(listJson.stdout).not.toContain('whsec_');
      expect([test.code, test.stdout]).toEqual([0, expect.stringMatching(/^Delivered: HTTP 200 in \d+ ms\.\n$/)]);
      const slack = receiver.received.filter((r) => r.path === '/cli');
      expect(slack.map((r) => [r.verified, r.json.text])).toEqual([
        [true, "runguard · webhook.test: this endpoint receives runguard's events."],
      ]);
      const log = JSON.parse((await cli('webhooks', 'deliveries', id!, '--json')).stdout);
      expect(log.items.map((d: any) => [d.event_type, d.status])).toEqual([['webhook.test', 'delivered']]);
      const [updated, unconfirmed] = await Promise.all([
        cli('webhooks', 'update', id!, '--enabled', 'off'),
        cli('webhooks', 'delete', id!),
      ]);
      expect(updated.stdout).toMatch(/disabled/);
      // As every delete: said, not done, without --yes.
      expect(unconfirmed.stderr).toMatch(/run again with --yes/);
      expect((await a.request('GET', `/v1/webhooks/${id}`)).status).toBe(200);
      expect((await cli('webhooks', 'delete', id!, '--yes')).code).toBe(0);
      expect((await a.request('GET', `/v1/webhooks/${id}`)).status).toBe(404);
    },
  );

  it('when a daemon is killed (SIGKILL) in the middle of a delivery, then another delivers every pending event, in order', async () => {
    const hook = await endpoint('/crash', { events: ['settings.changed'] });
    await b.kill(); // a alone delivers, until it dies
    receiver.mode = 'hang';
    for (let i = 1; i <= 10; i++)
      expect((await a.request('PATCH', '/v1/workspace', { name: `n${i}` })).status).toBe(200);
    await receiver.waitFor(() => receiver.hung > 0);
    await a.kill('SIGKILL');
    receiver.mode = { status: 200 };
    await b.start();
    const got = await receiver.waitFor((u) => u.filter((r) => r.path === '/crash').length >= 10, 60_000);
    expect(got.filter((r) => r.path === '/crash').map((r) => r.json.data.changes.name.after)).toEqual(
      Array.from({ length: 10 }, (_, i) => `n${i + 1}`),
    );
    expect(receiver.received.filter((r) => r.path === '/crash').every((r) => r.verified)).toBe(true);
    // The receiver has them all; the daemon records the last one's answer right after.
    const statuses = async () =>
      (
        await sql.query(
          `SELECT status, count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1 GROUP BY status`,
          [hook.id],
        )
      ).rows;
    for (let tries = 0; tries < 100 && (await statuses()).some((r) => r.status === 'pending'); tries++) await sleep(50);
    expect(await statuses()).toEqual([{ status: 'delivered', n: 10 }]);
  }, 90_000);
});
