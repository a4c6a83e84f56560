/**
 * One contract for the counters, run against every implementation: Redis (with Postgres as the
 * truth), SQL on real Postgres, and SQL on the embedded database. The counters are driven
 * through the service, so the suite also checks that they always equal the records.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { runCounts, scopeAt } from '../../src/store/counters/counters.js';
import { RedisCounters, redisClient } from '../../src/store/counters/redis-counters.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type TestStores } from '../support/harness.js';
import { REDIS_URL, testKeyPrefix } from '../support/services.js';

class TestClock {
  constructor(public current = new Date('2026-03-31T23:00:00Z')) {}
  now = () => this.current;
  set(iso: string) {
    this.current = new Date(iso);
  }
}

describe.each(BACKENDS)('counter store contract on %s', (backend) => {
  let stores: TestStores;
  const clock = new TestClock();
  let guard: GuardService;

  beforeAll(async () => {
    stores = await openTestStores(backend);
    guard = new GuardService(stores.db, stores.counters, clock, createLogger('silent'));
  });
  afterAll(async () => {
    await stores?.close();
  });

  const workspace = async (limits: { monthly?: number | null; concurrent?: number | null } = {}) => {
    const ws = await createWorkspace(stores.db, 'contract', 'enterprise');
    await stores.db.query('UPDATE workspaces SET monthly_run_limit = $2, max_concurrent_runs = $3 WHERE id = $1', [
      ws.id,
      limits.monthly ?? null,
      limits.concurrent ?? null,
    ]);
    await stores.db.query(
      `INSERT INTO model_pricing (id, workspace_id, model, input_cost_per_token, output_cost_per_token)
       VALUES (gen_random_uuid(), $1, 'm', 0.0000015, 0.000002)`,
      [ws.id],
    );
    return ws.id;
  };
  const read = async (ws: string, user = 'u') => {
    const scope = scopeAt(clock.now(), ws, user);
    return { ...(await stores.counters.readSpend(scope)), ...(await runCounts(stores.db, scope)) };
  };
  const start = async (ws: string, user = 'u') => await guard.startRun(ws, { user_id: user });
  /** A step of `tokens` prompt tokens at $0.0000015 each. */
  const spend = async (ws: string, runId: string, sequence: number, tokens: number) => {
    const step = await guard.createStep(ws, runId, { type: 'MODEL_CALL', sequence, model: 'm' });
    await guard.finishStep(ws, runId, step.id, {
      status: 'COMPLETED',
      durationMs: 1,
      promptTokens: tokens,
      completionTokens: 0,
    });
  };

  it('when nothing happened, then every counter reads zero', async () => {
    expect(await read(await workspace())).toEqual({
      workspaceDailySpendMicros: 0,
      userDailySpendMicros: 0,
      monthlyRuns: 0,
      concurrentRuns: 0,
    });
  });

  it('when runs start and end, then monthly counts allowed starts and concurrency counts RUNNING runs', async () => {
    const ws = await workspace({ concurrent: 3 });
    const runs = [await start(ws), await start(ws, 'v'), await start(ws)];
    expect((await start(ws)).status).toBe('BLOCKED'); // not counted
    expect(await read(ws)).toMatchObject({ monthlyRuns: 3, concurrentRuns: 3 });
    await guard.endRun(ws, runs[0]!.id, 'COMPLETED');
    await expect(guard.endRun(ws, runs[0]!.id, 'FAILED')).rejects.toMatchObject({ code: 'RUN_NOT_RUNNING' });
    expect(await read(ws)).toMatchObject({ monthlyRuns: 3, concurrentRuns: 2 });
  });

  it('when 30 admissions race for 4 slots, then exactly 4 are admitted and counted', async () => {
    const ws = await workspace({ concurrent: 4 });
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => start(ws, `u${i}`)));
    expect(results.filter((r) => r.status === 'RUNNING')).toHaveLength(4);
    expect(await read(ws)).toMatchObject({ monthlyRuns: 4, concurrentRuns: 4 });
    const running = await stores.db.query(
      `SELECT count(*)::int AS n FROM runs WHERE workspace_id = $1 AND status = 'RUNNING'`,
      [ws],
    );
    expect(running.rows[0]).toEqual({ n: 4 });
  });

  it('when the monthly limit is raced, then it holds exactly too', async () => {
    const ws = await workspace({ monthly: 7 });
    const results = await Promise.all(Array.from({ length: 20 }, () => start(ws)));
    expect(results.filter((r) => r.status === 'RUNNING')).toHaveLength(7);
    expect(results.filter((r) => r.decision.reason === 'MONTHLY_RUN_LIMIT_EXCEEDED')).toHaveLength(13);
  });

  it('when steps are priced, then workspace and user spend grow by the exact microdollars', async () => {
    const ws = await workspace();
    const a = await start(ws, 'alice');
    const b = await start(ws, 'bob');
    await spend(ws, a.id, 1, 1000); // 0.0015 USD = 1500 micros
    await spend(ws, a.id, 2, 1); // 0.0000015 rounds half up to 2 micros
    await spend(ws, b.id, 1, 333); // 0.0004995 -> 500 micros
    expect(await read(ws, 'alice')).toMatchObject({ workspaceDailySpendMicros: 2002, userDailySpendMicros: 1502 });
    expect(await read(ws, 'bob')).toMatchObject({ workspaceDailySpendMicros: 2002, userDailySpendMicros: 500 });
    expect(await read(ws, 'carol')).toMatchObject({ userDailySpendMicros: 0 });
  });

  it('when the UTC day and then the month turn, then spend and monthly runs start again; running runs stay', async () => {
    const ws = await workspace();
    clock.set('2026-03-31T23:59:00Z');
    const run = await start(ws);
    await spend(ws, run.id, 1, 1000);
    expect(await read(ws)).toMatchObject({ workspaceDailySpendMicros: 1500, monthlyRuns: 1, concurrentRuns: 1 });
    clock.set('2026-04-01T00:00:01Z');
    expect(await read(ws)).toEqual({
      workspaceDailySpendMicros: 0,
      userDailySpendMicros: 0,
      monthlyRuns: 0,
      concurrentRuns: 1,
    });
    await spend(ws, run.id, 2, 2000);
    expect(await read(ws)).toMatchObject({ workspaceDailySpendMicros: 3000 });
    clock.set('2026-03-31T23:59:30Z');
    expect(await read(ws)).toMatchObject({ workspaceDailySpendMicros: 1500, monthlyRuns: 1 });
    clock.set('2026-03-31T23:00:00Z');
  });
});

describe('Redis counters rebuilt from Postgres', () => {
  // A logical Redis database of its own, so FLUSHDB touches no other test.
  const REDIS_DB = 9;
  let stores: TestStores;
  let guard: GuardService;
  const clock = { now: () => new Date() };

  beforeAll(async () => {
    stores = await openTestStores('postgres+redis', { redisDb: REDIS_DB });
    guard = new GuardService(stores.db, stores.counters, clock, createLogger('silent'));
  });
  afterAll(async () => {
    await stores?.close();
  });

  it('when Redis is flushed, then spend is rebuilt from the records and never counted twice', async () => {
    const ws = await createWorkspace(stores.db, 'flush', 'scale');
    await stores.db.query('UPDATE workspaces SET max_concurrent_runs = 5 WHERE id = $1', [ws.id]);
    await stores.db.query(
      `INSERT INTO model_pricing (id, workspace_id, model, input_cost_per_token, output_cost_per_token) VALUES (gen_random_uuid(), $1, 'm', 0.01, 0)`,
      [ws.id],
    );
    const runs = [];
    for (let i = 0; i < 3; i++) runs.push(await guard.startRun(ws.id, { user_id: 'u' }));
    const step = await guard.createStep(ws.id, runs[0]!.id, { type: 'MODEL_CALL', sequence: 1, model: 'm' });
    await guard.finishStep(ws.id, runs[0]!.id, step.id, {
      status: 'COMPLETED',
      durationMs: 1,
      promptTokens: 7,
      completionTokens: 0,
    });
    await guard.endRun(ws.id, runs[1]!.id, 'COMPLETED');
    const scope = scopeAt(clock.now(), ws.id, 'u');
    const before = await stores.counters.readSpend(scope);
    expect(before).toEqual({ workspaceDailySpendMicros: 70_000, userDailySpendMicros: 70_000 });

    const redis = new Redis(`${REDIS_URL}/${REDIS_DB}`);
    expect(await redis.dbsize()).toBeGreaterThan(0);
    await redis.flushdb();
    expect(await redis.dbsize()).toBe(0);
    expect(await stores.counters.readSpend(scope)).toEqual(before);
    expect(await redis.dbsize()).toBeGreaterThan(0);

    // Flushed again while steps are priced in parallel: the copy ends equal to the records, never above.
    await redis.flushdb();
    const run = runs[0]!;
    await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const s = await guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', sequence: 10 + i, model: 'm' });
        if (i === 6) await redis.flushdb();
        await guard.finishStep(ws.id, run.id, s.id, {
          status: 'COMPLETED',
          durationMs: 1,
          promptTokens: 1,
          completionTokens: 0,
        });
      }),
    );
    const truth = { workspaceDailySpendMicros: 70_000 + 12 * 10_000, userDailySpendMicros: 70_000 + 12 * 10_000 };
    expect(await stores.counters.readSpend(scope)).toEqual(truth);
    redis.disconnect();
  });
});

describe('Redis counters when Redis is down', () => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores('postgres+sql');
  });
  afterAll(async () => {
    await stores?.close();
  });

  it('when Redis cannot be reached, then spend is read from the records and writes do not fail', async () => {
    const dead = new Redis('redis://127.0.0.1:1', {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
    });
    dead.on('error', () => {});
    const counters = new RedisCounters(dead, stores.db);
    const guard = new GuardService(stores.db, counters, { now: () => new Date() }, createLogger('silent'));
    const ws = await createWorkspace(stores.db, 'down', 'scale');
    await stores.db.query(
      `INSERT INTO model_pricing (id, workspace_id, model, input_cost_per_token, output_cost_per_token) VALUES (gen_random_uuid(), $1, 'm', 0.5, 0)`,
      [ws.id],
    );
    await stores.db.query('UPDATE workspaces SET daily_budget_micros = 1000000 WHERE id = $1', [ws.id]);
    const run = await guard.startRun(ws.id, { user_id: 'u' });
    for (const sequence of [1, 2]) {
      const s = await guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', sequence, model: 'm' });
      expect(s.status).toBe('ALLOWED');
      await guard.finishStep(ws.id, run.id, s.id, {
        status: 'COMPLETED',
        durationMs: 1,
        promptTokens: 1,
        completionTokens: 0,
      });
    }
    expect(await counters.readSpend(scopeAt(new Date(), ws.id, 'u'))).toEqual({
      workspaceDailySpendMicros: 1_000_000,
      userDailySpendMicros: 1_000_000,
    });
    const third = await guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', sequence: 3, model: 'm' });
    expect(third.decision.reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    await expect(counters.health()).rejects.toThrow();
    dead.disconnect();
  });
});

describe('Redis counters: raises asked for in one tick', () => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores('postgres+sql');
  });
  afterAll(async () => {
    await stores?.close();
  });

  it("when one user's raises are asked for together, then one script call carries the largest totals and each caller resolves after it", async () => {
    const redis = redisClient({ url: REDIS_URL, keyPrefix: testKeyPrefix() });
    await redis.connect();
    try {
      const counters = new RedisCounters(redis, stores.db);
      // The store's own script call (ioredis's auto-pipelining calls the command method twice).
      const scripts = vi.spyOn(counters as unknown as { raise: (...args: unknown[]) => Promise<void> }, 'raise');
      const scope = scopeAt(new Date(), randomUUID(), 'u');
      const other = { ...scope, userId: 'v' };
      const totals = (ws: number, user: number) => ({ workspaceDailySpendMicros: ws, userDailySpendMicros: user });
      // Out of order, as the answers of one shared commit may be handed out.
      const raised = [
        counters.spendRecorded(scope, totals(300, 30)),
        counters.spendRecorded(scope, totals(500, 50)),
        counters.spendRecorded(scope, totals(400, 40)),
        counters.spendRecorded(other, totals(450, 7)),
      ];
      const readWhenResolved = raised.map((p) => p.then(() => counters.readSpend(scope)));
      expect(await Promise.all(readWhenResolved)).toEqual(raised.map(() => totals(500, 50)));
      expect(await counters.readSpend(other)).toEqual(totals(500, 7));
      expect(scripts).toHaveBeenCalledTimes(2);

      // A later tick is a raise of its own, and a lower total lowers nothing.
      await counters.spendRecorded(scope, totals(200, 20));
      expect(scripts).toHaveBeenCalledTimes(3);
      expect(await counters.readSpend(scope)).toEqual(totals(500, 50));
    } finally {
      redis.disconnect();
    }
  });
});
