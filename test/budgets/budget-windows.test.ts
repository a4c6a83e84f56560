/**
 * The spend of a budget's week or month (rule 13) as the counters read it, against the records,
 * on every backend: across day, week and month turns. On Redis the days before today are read
 * from the records once and remembered by each daemon (past-spend.ts); these tests hold that
 * memory to the records through a flush, a late write from a daemon whose clock is behind (two
 * daemons on one Redis), a reconcile's repair, and a day that turns while it is remembered.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { scopeFor } from '../../src/guard/decision-inputs.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { reconcile } from '../../src/jobs/reconcile.js';
import { recordedSpend, type CounterStore } from '../../src/store/counters/counters.js';
import { RedisCounters, redisClient } from '../../src/store/counters/redis-counters.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type TestStores } from '../support/harness.js';
import { REDIS_URL } from '../support/services.js';

class TestClock {
  constructor(public current: Date) {}
  now = () => this.current;
  set(iso: string) {
    this.current = new Date(iso);
  }
}

const WINDOWS = { timeZone: 'UTC', week: true, month: true };

/** A workspace where model 'm' costs $0.001 a prompt token (1,000 microdollars). */
async function pricedWorkspace(stores: TestStores): Promise<string> {
  const ws = await createWorkspace(stores.db, 'windows', 'scale');
  await stores.db.query(
    `INSERT INTO model_pricing (id, workspace_id, model, input_cost_per_token, output_cost_per_token)
     VALUES (gen_random_uuid(), $1, 'm', 0.001, 0)`,
    [ws.id],
  );
  return ws.id;
}

/** A daemon's view: its guard (writing results on its clock's day) and its counters. */
function daemon(stores: TestStores, counters: CounterStore, clock: TestClock) {
  const guard = new GuardService(stores.db, counters, clock, createLogger('silent'));
  let sequence = 0;
  const runs = new Map<string, string>();
  return {
    /** A priced step of `tokens` thousand microdollars by `user`, finished now. */
    async spend(workspaceId: string, user: string, tokens: number) {
      let runId = runs.get(`${workspaceId}/${user}`);
      if (!runId) {
        runId = (await guard.startRun(workspaceId, { user_id: user })).id;
        runs.set(`${workspaceId}/${user}`, runId);
      }
      const step = await guard.createStep(workspaceId, runId, { type: 'MODEL_CALL', sequence: ++sequence, model: 'm' });
      expect(step.status).toBe('ALLOWED');
      await guard.finishStep(workspaceId, runId, step.id, {
        status: 'COMPLETED',
        durationMs: 1,
        promptTokens: tokens,
        completionTokens: 0,
      });
    },
    /** The windows a decision reads now, through this daemon's counters. */
    async read(workspaceId: string, user: string) {
      return (await counters.readDecisionInputs(scopeFor(clock.now(), workspaceId, user, WINDOWS))).spend;
    },
    /** The same windows from the records. */
    truth(workspaceId: string, user: string) {
      return recordedSpend(stores.db, scopeFor(clock.now(), workspaceId, user, WINDOWS));
    },
  };
}

describe.each(BACKENDS)('budget windows on %s', (backend) => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores(backend);
  });
  afterAll(async () => {
    await stores?.close();
  });

  it('when days, a week and a month turn, then each window counts exactly its days, as the records do', async () => {
    // Thursday 26 November 2026: the week began on Monday the 23rd, the month on the 1st.
    const clock = new TestClock(new Date('2026-11-26T10:00:00Z'));
    const one = daemon(stores, stores.counters, clock);
    const ws = await pricedWorkspace(stores);
    await one.spend(ws, 'u', 1);
    await one.spend(ws, 'v', 2);
    expect(await one.read(ws, 'u')).toEqual({
      workspaceDailySpendMicros: 3_000,
      userDailySpendMicros: 1_000,
      week: { workspaceMicros: 3_000, userMicros: 1_000 },
      month: { workspaceMicros: 3_000, userMicros: 1_000 },
    });

    // The next day: the 26th is past (remembered on Redis from here), today adds to it.
    clock.set('2026-11-27T00:00:01Z');
    expect(await one.read(ws, 'u')).toEqual({
      workspaceDailySpendMicros: 0,
      userDailySpendMicros: 0,
      week: { workspaceMicros: 3_000, userMicros: 1_000 },
      month: { workspaceMicros: 3_000, userMicros: 1_000 },
    });
    await one.spend(ws, 'u', 4);
    const friday = await one.read(ws, 'u');
    expect(friday).toEqual({
      workspaceDailySpendMicros: 4_000,
      userDailySpendMicros: 4_000,
      week: { workspaceMicros: 7_000, userMicros: 5_000 },
      month: { workspaceMicros: 7_000, userMicros: 5_000 },
    });
    expect(friday).toEqual(await one.truth(ws, 'u'));

    // Monday 30 November: a new week; the month keeps every day.
    clock.set('2026-11-30T12:00:00Z');
    await one.spend(ws, 'u', 8);
    expect(await one.read(ws, 'u')).toEqual({
      workspaceDailySpendMicros: 8_000,
      userDailySpendMicros: 8_000,
      week: { workspaceMicros: 8_000, userMicros: 8_000 },
      month: { workspaceMicros: 15_000, userMicros: 13_000 },
    });

    // Tuesday 1 December: a new month; the week still has Monday.
    clock.set('2026-12-01T00:00:00Z');
    await one.spend(ws, 'v', 16);
    const december = await one.read(ws, 'u');
    expect(december).toEqual({
      workspaceDailySpendMicros: 16_000,
      userDailySpendMicros: 0,
      week: { workspaceMicros: 24_000, userMicros: 8_000 },
      month: { workspaceMicros: 16_000, userMicros: 0 },
    });
    expect(december).toEqual(await one.truth(ws, 'u'));
    expect(await one.read(ws, 'v')).toEqual(await one.truth(ws, 'v'));
  });
});

describe('budget windows on Redis: the past days each daemon remembers', () => {
  let stores: TestStores;
  let second: RedisCounters;
  let redis: Redis;
  beforeAll(async () => {
    stores = await openTestStores('postgres+redis');
    const client = redisClient({ url: REDIS_URL, keyPrefix: stores.redisKeyPrefix! });
    await client.connect();
    // Another daemon's counters: the same Redis and Postgres, a memory of its own.
    second = new RedisCounters(client, stores.db);
    redis = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    await second?.close();
    redis?.disconnect();
    await stores?.close();
  });

  const prefix = () => stores.redisKeyPrefix!;
  const version = (ws: string) => redis.get(`${prefix()}{${ws}}:state`);
  /** Every key of this test's prefix deleted: Redis as after a FLUSHDB, for these daemons. */
  async function flush() {
    const keys = await redis.keys(`${prefix()}*`);
    if (keys.length) await redis.del(...keys);
    expect(await redis.keys(`${prefix()}*`)).toEqual([]);
  }

  it('when Redis is flushed mid-month, then the windows are rebuilt from the records, nothing lost or doubled', async () => {
    const clock = new TestClock(new Date('2026-11-20T10:00:00Z'));
    const one = daemon(stores, stores.counters, clock);
    const ws = await pricedWorkspace(stores);
    await one.spend(ws, 'u', 5);
    clock.set('2026-11-25T10:00:00Z');
    await one.spend(ws, 'u', 3);
    const remembered = await one.read(ws, 'u');
    expect(remembered).toEqual({
      workspaceDailySpendMicros: 3_000,
      userDailySpendMicros: 3_000,
      week: { workspaceMicros: 3_000, userMicros: 3_000 },
      month: { workspaceMicros: 8_000, userMicros: 8_000 },
    });
    await flush();
    expect(await one.read(ws, 'u')).toEqual(remembered);
    await one.spend(ws, 'u', 1);
    expect(await one.read(ws, 'u')).toEqual(await one.truth(ws, 'u'));
    expect((await one.read(ws, 'u')).month).toEqual({ workspaceMicros: 9_000, userMicros: 9_000 });
  });

  it("when a daemon whose clock is behind writes yesterday's spend, then a daemon that remembers yesterday counts it at once", async () => {
    const ahead = new TestClock(new Date('2026-11-27T00:00:30Z'));
    const behind = new TestClock(new Date('2026-11-26T23:59:50Z'));
    const one = daemon(stores, stores.counters, ahead);
    const two = daemon(stores, second, behind);
    const ws = await pricedWorkspace(stores);
    await two.spend(ws, 'u', 2);
    // The first daemon seals the 26th and remembers it: $0.002.
    expect((await one.read(ws, 'u')).week).toEqual({ workspaceMicros: 2_000, userMicros: 2_000 });
    const sealedAt = await version(ws);

    // The second daemon, still on the 26th by its clock, spends there twice more.
    await two.spend(ws, 'u', 7);
    await two.spend(ws, 'v', 1);
    expect(await version(ws)).not.toBe(sealedAt);
    const counted = await one.read(ws, 'u');
    expect(counted.week).toEqual({ workspaceMicros: 10_000, userMicros: 9_000 });
    expect(counted).toEqual(await one.truth(ws, 'u'));

    // Spend of today (for the first daemon) moves no version: what is remembered stays.
    const before = await version(ws);
    await one.spend(ws, 'u', 4);
    expect(await version(ws)).toBe(before);
    expect((await one.read(ws, 'u')).week).toEqual({ workspaceMicros: 14_000, userMicros: 13_000 });
    expect(await one.read(ws, 'u')).toEqual(await one.truth(ws, 'u'));
    // Both daemons agree on the first daemon's day.
    const onTheSameDay = daemon(stores, second, ahead);
    expect(await onTheSameDay.read(ws, 'u')).toEqual(await one.read(ws, 'u'));
  });

  it("when a reconcile repairs a past day's counter, then the windows read the repaired records at the next decision", async () => {
    const yesterday = daemon(stores, stores.counters, new TestClock(new Date('2026-11-26T12:00:00Z')));
    const clock = new TestClock(new Date('2026-11-27T12:00:00Z'));
    const today = daemon(stores, stores.counters, clock);
    const ws = await pricedWorkspace(stores);
    await yesterday.spend(ws, 'u', 6);
    // A hand edit of yesterday's rows, before the daemon remembers them.
    for (const table of ['usage_daily', 'user_usage_daily'])
      await stores.db.query(
        `UPDATE ${table} SET spend_micros = spend_micros + 500 WHERE workspace_id = $1 AND day = '2026-11-26'`,
        [ws],
      );
    expect((await today.read(ws, 'u')).month).toEqual({ workspaceMicros: 6_500, userMicros: 6_500 });
    const report = await reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: true });
    expect(report.drifts.map((drift) => drift.kind).sort()).toEqual(['user_usage', 'workspace_usage']);
    expect((await today.read(ws, 'u')).month).toEqual({ workspaceMicros: 6_000, userMicros: 6_000 });
    expect(await today.read(ws, 'u')).toEqual(await today.truth(ws, 'u'));
  });
});
