/**
 * Redis breaks for real under a running daemon: a private redis-server is killed and started
 * again empty, and the network to it is cut while it keeps its (then stale) keys. Decisions go on
 * from the Postgres records with the budget enforced to the microdollar, /health and the log say
 * that the counters are down, and once Redis answers again its copy is rebuilt from the records
 * (spend recorded during the outage included) and read again. Nothing is counted twice.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { startDaemonProcess, type DaemonProcess } from '../support/daemon-process.js';
import { startPrivateRedis, startTcpRelay, type PrivateRedis, type TcpRelay } from '../support/private-services.js';
import { clearOfUtcMidnight, MIDNIGHT_HOOK_TIMEOUT_MS } from '../support/utc-day.js';

/** Price of model `m`: $0.01 a prompt token, so one token is 10,000 microdollars. */
const MICROS_PER_TOKEN = 10_000;

describe('Redis down or unreachable under a running daemon', () => {
  let redis: PrivateRedis;
  let relay: TcpRelay;
  let daemon: DaemonProcess;
  let db: pg.Client;
  let peek: Redis;
  let workspaceId: string;
  let runId: string;
  let sequence = 0;
  const day = () => new Date().toISOString().slice(0, 10);

  beforeAll(async () => {
    await clearOfUtcMidnight();
    redis = await startPrivateRedis();
    relay = await startTcpRelay(redis.port);
    daemon = await startDaemonProcess({ redisUrl: `redis://127.0.0.1:${relay.port}` });
    db = new pg.Client({ connectionString: daemon.databaseUrl });
    await db.connect();
    // Reads the copy directly, past the relay; fails fast while the server is down.
    peek = new Redis(redis.url, {
      keyPrefix: daemon.redisKeyPrefix,
      lazyConnect: true,
      maxRetriesPerRequest: 1,
      retryStrategy: () => 50,
    });
    peek.on('error', () => {});
    workspaceId = (await daemon.request('GET', '/v1/workspace')).body.id;
    await daemon.request('PUT', '/v1/model-pricing/m', { input_cost_per_token: 0.01, output_cost_per_token: 0 });
    expect((await daemon.request('PATCH', '/v1/workspace', { daily_budget_usd: 0.1 })).status).toBe(200);
    runId = (await daemon.request('POST', '/v1/runs', { user_id: 'ada' })).body.id;
  }, MIDNIGHT_HOOK_TIMEOUT_MS);
  afterAll(async () => {
    peek?.disconnect();
    await db?.end();
    await daemon?.close();
    await relay?.close();
    await redis?.close();
  });

  /** Creates a step; when allowed, reports one prompt token. Returns the decision. */
  const step = async () => {
    const created = await daemon.request('POST', `/v1/runs/${runId}/steps`, {
      type: 'MODEL_CALL',
      sequence: ++sequence,
      model: 'm',
    });
    expect(created.status).toBe(201);
    if (created.body.status === 'ALLOWED') {
      const finished = await daemon.request('PATCH', `/v1/runs/${runId}/steps/${created.body.id}`, {
        status: 'COMPLETED',
        prompt_tokens: 1,
      });
      expect(finished.status).toBe(200);
    }
    return created.body.decision as { outcome: string; reason: string | null };
  };
  /** Steps until the first denial: how many were allowed, and the denial's reason. */
  const spendUntilDenied = async () => {
    for (let allowed = 0; ; allowed++) {
      const decision = await step();
      if (decision.outcome === 'DENY') return { allowed, reason: decision.reason };
      if (allowed > 50) throw new Error('the budget was never enforced');
    }
  };
  const copy = async () => {
    await peek.connect().catch(() => {});
    return peek.mget(`{${workspaceId}}:spend:${day()}`, `{${workspaceId}}:uspend:${day()}:ada`);
  };
  /** Today's spend counter and what the step records add up to. */
  const records = async () => {
    const { rows } = await db.query(
      `SELECT (SELECT spend_micros FROM usage_daily WHERE workspace_id = $1 AND day = $2)::bigint AS counter,
         (SELECT coalesce(sum(round(cost_usd * 1000000)), 0) FROM steps WHERE workspace_id = $1)::bigint AS steps`,
      [workspaceId, day()],
    );
    return { counter: Number(rows[0].counter), steps: Number(rows[0].steps) };
  };
  const health = async () => {
    const res = await fetch(`${daemon.url}/health`);
    return { status: res.status, body: (await res.json()) as { checks: Record<string, string>; detail?: string } };
  };
  const healthy = async () => {
    const deadline = Date.now() + 10_000;
    while ((await health()).status !== 200) {
      if (Date.now() > deadline) throw new Error('/health stayed 503 after Redis came back');
      await sleep(50);
    }
  };

  it('when Redis is killed, then decisions go on from Postgres, /health and the log name the counters, and the budget holds exactly', async () => {
    expect((await step()).outcome).toBe('ALLOW');
    expect((await step()).outcome).toBe('ALLOW');
    expect(await copy()).toEqual(['20000', '20000']);

    await redis.stop('SIGKILL');
    for (let i = 0; i < 3; i++) expect((await step()).outcome).toBe('ALLOW');
    const down = await health();
    expect(down.status).toBe(503);
    expect(down.body.checks).toEqual({ database: 'ok', counters: 'unavailable' });
    expect(down.body.detail).toBe('Unavailable: counters.');
    expect(daemon.output()).toContain('Redis unavailable: decisions read spend from Postgres');
    expect(await records()).toEqual({ counter: 5 * MICROS_PER_TOKEN, steps: 5 * MICROS_PER_TOKEN });

    // Redis comes back empty: the first decision rebuilds the copy from the records, outage spend included.
    await redis.start();
    await healthy();
    await sleep(1_100); // past the pause after the last failure, so the next read goes to Redis
    expect((await step()).outcome).toBe('ALLOW');
    expect(await copy()).toEqual(['60000', '60000']);
    // Budget $0.10: 10 steps of $0.01 in all, exactly; the 11th is denied.
    expect(await spendUntilDenied()).toEqual({ allowed: 4, reason: 'WORKSPACE_DAILY_BUDGET_EXCEEDED' });
    expect(await records()).toEqual({ counter: 100_000, steps: 100_000 });
    expect(await copy()).toEqual(['100000', '100000']);
  });

  it('when Redis answers again, then decisions read its copy again', async () => {
    await daemon.request('PATCH', '/v1/workspace', { daily_budget_usd: 0.2 });
    expect((await step()).outcome).toBe('ALLOW'); // 110,000 of 200,000
    // A copy raised by hand (never done in production) shows that the decision reads it.
    await peek.set(`{${workspaceId}}:spend:${day()}`, '200000');
    expect((await step()).reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    await peek.set(`{${workspaceId}}:spend:${day()}`, '110000');
    expect((await step()).outcome).toBe('ALLOW');
    expect(await records()).toEqual({ counter: 120_000, steps: 120_000 });
  });

  it('when the network to Redis is cut while it keeps its keys, then spend recorded meanwhile is in its copy when it returns', async () => {
    await daemon.request('PATCH', '/v1/workspace', { daily_budget_usd: 0.17 });
    expect(await copy()).toEqual(['120000', '120000']);
    await relay.cut();
    // Five steps while the copy cannot be written: the records reach the budget.
    for (let i = 0; i < 5; i++) expect((await step()).outcome).toBe('ALLOW');
    expect((await health()).body.checks.counters).toBe('unavailable');
    expect((await step()).reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    expect(await copy()).toEqual(['120000', '120000']); // stale, as nothing could reach it

    await relay.restore();
    await healthy();
    await sleep(1_100);
    // Read from Redis again: a stale copy would allow this step.
    expect((await step()).reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    // That read started the rebuild without waiting for it (a denied step writes nothing itself).
    await expect.poll(copy, { timeout: 2_000 }).toEqual(['170000', '170000']);
    expect((await step()).reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED'); // now read from the rebuilt copy
    expect(await records()).toEqual({ counter: 170_000, steps: 170_000 });
  });

  it('when the daemon restarts while Redis is down, then it starts, decides from Postgres, and rebuilds the copy once Redis is back', async () => {
    await daemon.request('PATCH', '/v1/workspace', { daily_budget_usd: 0.2 });
    await redis.stop('SIGKILL');
    await daemon.kill('SIGKILL');
    await daemon.start({ unhealthy: true });
    expect((await health()).body.checks).toEqual({ database: 'ok', counters: 'unavailable' });
    expect((await step()).outcome).toBe('ALLOW');
    expect((await step()).outcome).toBe('ALLOW');
    expect(daemon.output()).toContain('Redis unavailable at start');

    await redis.start();
    await healthy();
    await sleep(1_100);
    expect(await spendUntilDenied()).toEqual({ allowed: 1, reason: 'WORKSPACE_DAILY_BUDGET_EXCEEDED' });
    await expect.poll(copy, { timeout: 2_000 }).toEqual(['200000', '200000']);
    expect(await records()).toEqual({ counter: 200_000, steps: 200_000 });
  });

  it("when Redis comes back with an older copy and none of the daemon's commands failed (a restart from a snapshot), then that copy is not read until raised", async () => {
    await sleep(1_100); // past any pause after a failure: the copy is read
    expect((await step()).reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED'); // 200,000 of 200,000
    // What a restart from an older snapshot leaves: lower values, and the daemon's connection dropped.
    await peek.mset(`{${workspaceId}}:spend:${day()}`, '110000', `{${workspaceId}}:uspend:${day()}:ada`, '110000');
    await peek.client('KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
    await expect.poll(async () => (await health()).status, { timeout: 5_000 }).toBe(200);
    await sleep(300); // the daemon has reconnected; nothing of it failed
    expect((await step()).reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    await expect.poll(copy, { timeout: 2_000 }).toEqual(['200000', '200000']);
    expect(await records()).toEqual({ counter: 200_000, steps: 200_000 });
  });
});
