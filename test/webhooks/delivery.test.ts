/**
 * Webhooks end to end: two real daemons on one Postgres and one Redis, a real receiver on
 * loopback (allowed by configuration), signatures checked by the receiver's own verifier.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { startDaemonProcess, type DaemonProcess } from '../support/daemon-process.js';
import { startReceiver, type Receiver } from '../support/webhook-receiver.js';

const ENV = {
  RUNGUARD_WEBHOOK_ALLOW_PRIVATE: 'true',
  RUNGUARD_WEBHOOK_POLL_INTERVAL_MS: '100',
  RUNGUARD_WEBHOOK_SCAN_INTERVAL_MS: '200',
  RUNGUARD_WEBHOOK_RETRY_BASE_MS: '100',
  RUNGUARD_WEBHOOK_TIMEOUT_MS: '1000',
  RUNGUARD_WEBHOOK_DENIAL_WINDOW_MS: '2000',
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
    a = await startDaemonProcess({ env: ENV });
    b = await startDaemonProcess({ sharing: a, env: ENV });
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
    expect((await a.request('PUT', '/v1/model-pricing/m1', { input_cost_per_token: 0.001, output_cost_per_token: 0 })).status).toBe(200);
    expect((await a.request('PATCH', '/v1/workspace', { daily_budget_usd: 10, user_daily_budget_usd: 8 })).status).toBe(200);
    // Steps of $0.50, alternately through each daemon: alice until her own $8 denies her, then bob
    // until the workspace's $10 does.
    for (const user of ['alice', 'bob']) {
      const run = (await a.request('POST', '/v1/runs', { user_id: user })).body;
      for (let sequence = 1; sequence <= 30; sequence++) {
        const daemon = sequence % 2 ? a : b;
        const step = (await daemon.request('POST', `/v1/runs/${run.id}/steps`, { type: 'MODEL_CALL', model: 'm1', sequence })).body;
        if (step.status !== 'ALLOWED') break;
        expect((await daemon.request('PATCH', `/v1/runs/${run.id}/steps/${step.id}`, { status: 'COMPLETED', prompt_tokens: 500 })).status).toBe(200);
      }
    }
    const isWorkspace = (r: { json: any }) => r.json.type === 'budget.threshold' && r.json.data.subject.type === 'workspace';
    await receiver.waitFor((u) => u.filter(isWorkspace).length >= 3);
    // Both daemons scan every 200 ms: give them several rounds to send a duplicate, should they.
    await sleep(1_500);
    const events = receiver.unique().filter((r) => r.json.type === 'budget.threshold');
    const workspace = events.filter(isWorkspace).map((r) => r.json.data);
    expect(workspace.map((d) => d.threshold)).toEqual([0.5, 0.8, 1]);
    expect(workspace.every((d) => d.budget_usd === 10 && d.spend_usd >= d.threshold * 10)).toBe(true);
    // alice's $8: all three of hers; bob's $2 of $8 crosses none.
    expect(events.filter((r) => r.json.data.subject.type === 'user').map((r) => [r.json.data.subject.id, r.json.data.threshold]))
      .toEqual([['alice', 0.5], ['alice', 0.8], ['alice', 1]]);
    // Each event once: however many times it was sent, it exists once, and each request verified.
    const { rows } = await sql.query(`SELECT count(*)::int AS n FROM webhook_events WHERE type = 'budget.threshold'`);
    expect(rows[0].n).toBe(6);
    const all = receiver.received.filter((r) => r.json?.type === 'budget.threshold');
    expect(new Set(all.map((r) => r.id)).size).toBe(6);
    expect(all.every((r) => r.verified)).toBe(true);
    expect(hook.id).toBeTruthy();
  });
});
