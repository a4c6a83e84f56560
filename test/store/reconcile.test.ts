/**
 * Reconciliation finds every kind of drift between counters and records, and repairs it: with
 * what was written between the check and the repair, and without deadlocking the writers.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { reconcile } from '../../src/jobs/reconcile.js';
import { scopeAt, type CounterScope, type CounterStore, type DailySpend } from '../../src/store/counters/counters.js';
import type { Db, Queryable } from '../../src/store/db.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { openTestStores, type TestStores } from '../support/harness.js';
import { REDIS_URL } from '../support/services.js';

describe('reconcile', () => {
  let stores: TestStores;
  let guard: GuardService;
  const clock = { now: () => new Date() };
  beforeAll(async () => {
    stores = await openTestStores('postgres+redis');
    guard = new GuardService(stores.db, stores.counters, clock, createLogger('silent'));
  });
  afterAll(async () => {
    await stores?.close();
  });

  /** A workspace where model 'm' costs $0.001 a prompt token and $0.002 a completion token. */
  const pricedWorkspace = async (name: string) => {
    const ws = await createWorkspace(stores.db, name, 'scale');
    await stores.db.query(
      `INSERT INTO model_pricing (id, workspace_id, model, input_cost_per_token, output_cost_per_token) VALUES (gen_random_uuid(), $1, 'm', 0.001, 0.002)`,
      [ws.id],
    );
    return ws;
  };
  /** A run of user 'u' with `count` steps of model 'm'; answers finish(i), which completes step i at 10 + 5 tokens (0.02 USD). */
  const runWithSteps = async (workspaceId: string, count: number) => {
    const run = await guard.startRun(workspaceId, { user_id: 'u' });
    const steps: { id: string }[] = [];
    for (let sequence = 1; sequence <= count; sequence++) {
      steps.push(await guard.createStep(workspaceId, run.id, { type: 'MODEL_CALL', sequence, model: 'm' }));
    }
    const finish = (i: number) =>
      guard.finishStep(workspaceId, run.id, steps[i]!.id, {
        status: 'COMPLETED',
        durationMs: 1,
        promptTokens: 10,
        completionTokens: 5,
      });
    return finish;
  };

  it('when counters and the Redis copy are tampered with, then each drift is reported and repaired', async () => {
    const ws = await pricedWorkspace('r');
    const run = await guard.startRun(ws.id, { user_id: 'u' });
    for (const sequence of [1, 2, 3]) {
      const s = await guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', sequence, model: 'm' });
      await guard.finishStep(ws.id, run.id, s.id, {
        status: 'COMPLETED',
        durationMs: 1,
        promptTokens: 10,
        completionTokens: 5,
      });
    }
    const clean = await reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: false });
    expect(clean.drifts.filter((d) => d.key.startsWith(ws.id) || d.key === run.id)).toEqual([]);

    await stores.db.query('UPDATE usage_daily SET spend_micros = spend_micros + 7, runs = 9 WHERE workspace_id = $1', [
      ws.id,
    ]);
    await stores.db.query('UPDATE user_usage_daily SET spend_micros = 1 WHERE workspace_id = $1', [ws.id]);
    const scope = scopeAt(clock.now(), ws.id, 'u');
    const redis = new Redis(REDIS_URL, { keyPrefix: stores.redisKeyPrefix! });
    await redis.set(`{${ws.id}}:spend:${scope.day}`, '999999999');

    const found = await reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: true });
    const mine = found.drifts.filter((d) => d.key.startsWith(ws.id) || d.key === run.id);
    expect(mine.map((d) => d.kind).sort()).toEqual(['spend_copy', 'user_usage', 'workspace_usage']);
    expect(mine.find((d) => d.kind === 'workspace_usage')).toMatchObject({
      expected: 'spend=60000 runs=1',
      found: 'spend=60007 runs=9',
    });

    const after = await reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: false });
    expect(after.drifts.filter((d) => d.key.startsWith(ws.id) || d.key === run.id)).toEqual([]);
    expect(await stores.counters.readSpend(scope)).toEqual({
      workspaceDailySpendMicros: 60_000,
      userDailySpendMicros: 60_000,
    });
    redis.disconnect();
  });

  it('when steps are finished and runs started between the check and its repair, then the repair counts them too', async () => {
    const ws = await pricedWorkspace('race');
    const finish = await runWithSteps(ws.id, 3);
    await finish(0);
    await stores.db.query('UPDATE usage_daily SET spend_micros = 1, runs = 9 WHERE workspace_id = $1', [ws.id]);
    await stores.db.query('UPDATE user_usage_daily SET spend_micros = 1 WHERE workspace_id = $1', [ws.id]);

    // Once reconcile has read the drifts, and before it repairs them, the workspace moves on.
    let checks = 0;
    const afterSecondCheck =
      (query: Queryable['query']): Queryable['query'] =>
      async (sql, params) => {
        const result = await query(sql, params);
        if (sql.includes('FULL JOIN') && ++checks === 2) {
          await Promise.all([finish(1), finish(2), guard.startRun(ws.id, { user_id: 'u' })]);
        }
        return result as never;
      };
    const between: Db = {
      ...stores.db,
      query: afterSecondCheck((sql, params) => stores.db.query(sql, params)),
      transaction: (fn) =>
        stores.db.transaction((tx) => fn({ query: afterSecondCheck((sql, params) => tx.query(sql, params)) })),
    };
    const found = await reconcile(between, stores.counters, { now: clock.now(), days: 2, repair: true });
    // The workspaces', the users' and the key and tag subjects' daily rows: three checks.
    expect(checks).toBe(3);
    expect(
      found.drifts
        .filter((d) => d.key.startsWith(ws.id) && d.kind !== 'spend_copy')
        .map((d) => d.kind)
        .sort(),
    ).toEqual(['user_usage', 'workspace_usage']);

    const after = await reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: false });
    expect(after.drifts.filter((d) => d.key.startsWith(ws.id))).toEqual([]);
    const { rows } = await stores.db.query<{ spend_micros: string; runs: string }>(
      'SELECT spend_micros::text, runs::text FROM usage_daily WHERE workspace_id = $1',
      [ws.id],
    );
    expect(rows).toEqual([{ spend_micros: '60000', runs: '2' }]);
  });

  it("when a step's spend is raised in the copy while a repair sets it, then the copy ends at the records, not below", async () => {
    const ws = await pricedWorkspace('copy-race');
    const finish = await runWithSteps(ws.id, 2);
    await finish(0);
    const scope = scopeAt(clock.now(), ws.id, 'u');
    const redis = new Redis(REDIS_URL, { keyPrefix: stores.redisKeyPrefix! });
    await redis.set(`{${ws.id}}:spend:${scope.day}`, '999999999'); // the copy above the records: a hand edit

    // The repair read the records; a step finishes (and raises the copy) before it sets the copy.
    const racing: CounterStore = Object.assign(Object.create(stores.counters), {
      resyncSpend: async (s: CounterScope, totals: DailySpend) => {
        await finish(1);
        return stores.counters.resyncSpend(s, totals);
      },
    });
    const found = await reconcile(stores.db, racing, { now: clock.now(), days: 1, repair: true });
    expect(found.drifts.filter((d) => d.key.startsWith(ws.id)).map((d) => d.kind)).toEqual(['spend_copy']);
    expect(await stores.counters.readSpend(scope)).toEqual({
      workspaceDailySpendMicros: 40_000,
      userDailySpendMicros: 40_000,
    });
    redis.disconnect();
  });

  it('when steps are finished while the copy is checked, then a copy ahead of the records read before is no drift, and is never set down', async () => {
    const ws = await pricedWorkspace('copy-ahead');
    const finish = await runWithSteps(ws.id, 3);
    await finish(0);
    const scope = scopeAt(clock.now(), ws.id, 'u');
    // Reconcile has read the records; steps finish (their raises land) before it reads the copy.
    let sets = 0;
    let finished = false;
    const busy: CounterStore = Object.assign(Object.create(stores.counters), {
      readSpend: async (s: CounterScope) => {
        if (!finished && s.workspaceId === ws.id) {
          finished = true;
          await finish(1);
          await finish(2);
        }
        return stores.counters.readSpend(s);
      },
      resyncSpend: async (s: CounterScope, totals: DailySpend) => {
        if (s.workspaceId === ws.id) sets++;
        return stores.counters.resyncSpend(s, totals);
      },
    });
    const found = await reconcile(stores.db, busy, { now: clock.now(), days: 1, repair: true });
    expect(finished).toBe(true);
    expect(found.drifts.filter((d) => d.key.startsWith(ws.id))).toEqual([]);
    expect(sets).toBe(0);
    expect(await stores.counters.readSpend(scope)).toEqual({
      workspaceDailySpendMicros: 60_000,
      userDailySpendMicros: 60_000,
    });
  });

  it('when the copy is behind the records (a raise lost), then it is reported and raised, not set', async () => {
    const ws = await pricedWorkspace('copy-behind');
    const finish = await runWithSteps(ws.id, 1);
    await finish(0);
    const scope = scopeAt(clock.now(), ws.id, 'u');
    const redis = new Redis(REDIS_URL, { keyPrefix: stores.redisKeyPrefix! });
    await redis.set(`{${ws.id}}:spend:${scope.day}`, '5');
    let sets = 0;
    const counting: CounterStore = Object.assign(Object.create(stores.counters), {
      resyncSpend: async (s: CounterScope, totals: DailySpend) => {
        if (s.workspaceId === ws.id) sets++;
        return stores.counters.resyncSpend(s, totals);
      },
    });
    const found = await reconcile(stores.db, counting, { now: clock.now(), days: 1, repair: true });
    expect(found.drifts.filter((d) => d.key.startsWith(ws.id))).toMatchObject([
      { kind: 'spend_copy', expected: '20000/20000', found: '5/20000' },
    ]);
    expect(sets).toBe(0);
    expect(await stores.counters.readSpend(scope)).toEqual({
      workspaceDailySpendMicros: 20_000,
      userDailySpendMicros: 20_000,
    });
    redis.disconnect();
  });

  it('when the session is in a time zone east of UTC, then the oldest day checked still starts at midnight UTC', async () => {
    const ws = await pricedWorkspace('zone');
    // Spend at 20:00 UTC yesterday: in UTC+14 that is already today.
    const today = new Date();
    const evening = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() - 1, 20));
    const yesterday = new GuardService(stores.db, stores.counters, { now: () => evening }, createLogger('silent'));
    const run = await yesterday.startRun(ws.id, { user_id: 'u' });
    const step = await yesterday.createStep(ws.id, run.id, { type: 'MODEL_CALL', sequence: 1, model: 'm' });
    await yesterday.finishStep(ws.id, run.id, step.id, {
      status: 'COMPLETED',
      durationMs: 1,
      promptTokens: 10,
      completionTokens: 5,
    });
    const zoned: Db = {
      ...stores.db,
      query: (sql, params) =>
        stores.db.transaction(async (tx) => {
          await tx.query("SET LOCAL TIME ZONE 'Pacific/Kiritimati'");
          return tx.query(sql, params);
        }) as never,
      transaction: (fn) =>
        stores.db.transaction(async (tx) => {
          await tx.query("SET LOCAL TIME ZONE 'Pacific/Kiritimati'");
          return fn(tx);
        }),
    };
    for (const repair of [false, true]) {
      const found = await reconcile(zoned, stores.counters, { now: today, days: 1, repair });
      expect(found.drifts.filter((d) => d.key.startsWith(ws.id))).toEqual([]);
    }
    const { rows } = await stores.db.query<{ day: string; spend_micros: string }>(
      'SELECT day::text, spend_micros::text FROM usage_daily WHERE workspace_id = $1',
      [ws.id],
    );
    expect(rows).toEqual([{ day: evening.toISOString().slice(0, 10), spend_micros: '20000' }]);
  });

  it('when repairs run while many users start runs and finish steps, then nothing deadlocks and no write is lost', async () => {
    const ws = await pricedWorkspace('busy');
    const users = Array.from({ length: 8 }, (_, i) => `user-${i}`);
    const work = async (user: string) => {
      for (let k = 0; k < 4; k++) {
        const run = await guard.startRun(ws.id, { user_id: user });
        const step = await guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', sequence: 1, model: 'm' });
        await guard.finishStep(ws.id, run.id, step.id, {
          status: 'COMPLETED',
          durationMs: 1,
          promptTokens: 10,
          completionTokens: 5,
        });
      }
    };
    const repairs = async () => {
      for (let k = 0; k < 6; k++) {
        // Every user's day and the workspace's day drift, so each repair writes all of them. (The
        // rows locked in the writers' order, so that the tampering itself cannot deadlock them.)
        await stores.db.query(
          `UPDATE user_usage_daily u SET spend_micros = u.spend_micros + 1
           FROM (SELECT user_id, day FROM user_usage_daily WHERE workspace_id = $1 ORDER BY user_id, day FOR UPDATE) k
           WHERE u.workspace_id = $1 AND u.user_id = k.user_id AND u.day = k.day`,
          [ws.id],
        );
        await stores.db.query('UPDATE usage_daily SET runs = runs + 1 WHERE workspace_id = $1', [ws.id]);
        await reconcile(stores.db, stores.counters, { now: clock.now(), days: 1, repair: true });
      }
    };
    await Promise.all([...users.map(work), repairs(), repairs()]);
    // Each loop's last repair came after its last tampering: nothing is left to find in the
    // records, unless a repair lost a write. (The Redis copy is left out: a step finished on a
    // tampered row raised it to that row's total, and may have done so after the last repair.)
    const after = await reconcile(stores.db, stores.counters, { now: clock.now(), days: 1, repair: false });
    expect(after.drifts.filter((d) => d.key.startsWith(ws.id) && d.kind !== 'spend_copy')).toEqual([]);
    const { rows } = await stores.db.query<{ spend_micros: string; runs: string }>(
      'SELECT spend_micros::text, runs::text FROM usage_daily WHERE workspace_id = $1',
      [ws.id],
    );
    expect(rows).toEqual([{ spend_micros: String(32 * 20_000), runs: '32' }]);
  });

  it('when the run counts drift (triggers off), then an on-demand reconcile reports and repairs them, keeping the runs written meanwhile', async () => {
    const ws = await pricedWorkspace('counts');
    const counted = async () =>
      (
        await stores.db.query<{ status: string; n: string }>(
          `SELECT status, count(*)::text AS n FROM runs WHERE workspace_id = $1 GROUP BY status ORDER BY status`,
          [ws.id],
        )
      ).rows;
    const kept = async () =>
      (
        await stores.db.query<{ status: string; n: string }>(
          `SELECT status, sum(runs)::text AS n FROM run_counts WHERE workspace_id = $1 GROUP BY status HAVING sum(runs) <> 0 ORDER BY status`,
          [ws.id],
        )
      ).rows;
    const mine = (report: { drifts: { kind: string; key: string }[] }) =>
      report.drifts.filter((d) => d.key.startsWith(ws.id));
    await stores.db.query('ALTER TABLE runs DISABLE TRIGGER run_counts_insert');
    try {
      for (let i = 0; i < 3; i++) await guard.startRun(ws.id, { user_id: 'u' });
    } finally {
      await stores.db.query('ALTER TABLE runs ENABLE TRIGGER run_counts_insert');
    }
    // The periodic pass leaves the counts out (it would read every run).
    expect(mine(await reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: false }))).toEqual([]);
    const found = await reconcile(stores.db, stores.counters, {
      now: clock.now(),
      days: 2,
      repair: false,
      runCounts: true,
    });
    expect(mine(found)).toEqual([{ kind: 'run_count', key: `${ws.id}/RUNNING`, expected: 'runs=3', found: 'runs=0' }]);

    // Repaired while runs start and end: what they write is counted by the triggers, and stays.
    const work = async () => {
      for (let k = 0; k < 6; k++) {
        const run = await guard.startRun(ws.id, { user_id: `w${k}` });
        if (k % 2) await guard.endRun(ws.id, run.id, 'COMPLETED');
      }
    };
    await Promise.all([
      work(),
      work(),
      reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: true, runCounts: true }),
    ]);
    expect(
      mine(await reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: false, runCounts: true })),
    ).toEqual([]);
    expect(await kept()).toEqual(await counted());
    expect(await counted()).toEqual([
      { status: 'COMPLETED', n: '6' },
      { status: 'RUNNING', n: '9' },
    ]);
  });
});
