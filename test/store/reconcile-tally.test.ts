/**
 * The periodic reconcile's sliced recount (store/reconcile-tally.ts, `reconcileInSlices`): it finds
 * exactly what the one-statement recount finds, however the records are sliced, sees one snapshot
 * while steps finish between its slices, and repairs through `reconcile` when it finds drift.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { reconcileInSlices } from '../../src/jobs/reconcile.js';
import { lockForTransaction } from '../../src/store/advisory-locks.js';
import { buildLateIndexesNow } from '../../src/store/late-indexes.js';
import { readOneSnapshot, tallyDrift } from '../../src/store/reconcile-tally.js';
import { subjectUsageDrift, usageDrift, userUsageDrift } from '../../src/store/reconcile.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { openTestStores, type TestStores } from '../support/harness.js';

const clock = { now: () => new Date() };
const today = () => clock.now().toISOString().slice(0, 10);
const mine = (workspaceId: string) => (row: Record<string, string>) => row.workspace_id === workspaceId;

describe.each(['postgres+redis', 'embedded'] as const)('reconcile in slices (%s)', (backend) => {
  let stores: TestStores;
  let guard: GuardService;
  beforeAll(async () => {
    stores = await openTestStores(backend);
    // The index the steps' slices read (a daemon builds it once it listens).
    await buildLateIndexesNow(stores.db);
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
  /** `count` steps of user `user` in a tagged run, and finish(i), which completes step i (0.02 USD). */
  const runWithSteps = async (workspaceId: string, count: number, user = 'u', finisher = guard) => {
    const run = await guard.startRun(workspaceId, { user_id: user, tags: { team: 'a' } });
    const steps: { id: string }[] = [];
    for (let sequence = 1; sequence <= count; sequence++)
      steps.push(await guard.createStep(workspaceId, run.id, { type: 'MODEL_CALL', sequence, model: 'm' }));
    return (i: number) =>
      finisher.finishStep(workspaceId, run.id, steps[i]!.id, {
        status: 'COMPLETED',
        durationMs: 1,
        promptTokens: 10,
        completionTokens: 5,
      });
  };
  /** The sliced recount, `perSlice` records a slice, in its own repeatable-read transaction. */
  const tally = (perSlice: number, between?: () => Promise<void>) =>
    stores.db.transaction(async (tx) => {
      await readOneSnapshot(tx);
      return tallyDrift(tx, clock.now(), { from: today(), perSlice, ...(between ? { between } : {}) });
    });

  it('when counters are tampered with, then the sliced recount finds what the one-statement recount finds, row for row, however small its slices', async () => {
    const ws = await pricedWorkspace('same');
    for (const user of ['u1', 'u2']) {
      const finish = await runWithSteps(ws.id, 4, user);
      for (let i = 0; i < 4; i++) await finish(i);
    }
    // Spread the steps' finishes over the last hours, as a day's are: the slices' spans differ.
    await stores.db.query(
      `UPDATE steps SET finished_at = greatest(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', now() - sequence * interval '17 minutes')
       WHERE workspace_id = $1`,
      [ws.id],
    );
    await stores.db.query('UPDATE usage_daily SET spend_micros = spend_micros + 7, runs = 9 WHERE workspace_id = $1', [
      ws.id,
    ]);
    await stores.db.query("UPDATE user_usage_daily SET spend_micros = 1 WHERE workspace_id = $1 AND user_id = 'u2'", [
      ws.id,
    ]);
    await stores.db.query(
      "UPDATE subject_usage_daily SET spend_micros = 3 WHERE workspace_id = $1 AND subject = 'tag:team:a'",
      [ws.id],
    );
    const expected = {
      usage: (await usageDrift(stores.db, today())).filter(mine(ws.id)),
      userUsage: (await userUsageDrift(stores.db, today())).filter(mine(ws.id)),
      subjectUsage: (await subjectUsageDrift(stores.db, today())).filter(mine(ws.id)),
    };
    expect(expected.usage).toHaveLength(1);
    expect(expected.userUsage).toHaveLength(1);
    expect(expected.subjectUsage).toHaveLength(1);
    for (const perSlice of [1, 3, 20_000]) {
      const found = await tally(perSlice);
      expect({
        usage: found.usage.filter(mine(ws.id)),
        userUsage: found.userUsage.filter(mine(ws.id)),
        subjectUsage: found.subjectUsage.filter(mine(ws.id)),
      }).toEqual(expected);
    }
  });

  // The embedded database reads the steps in one slice (its one connection is the pass's until it
  // ends: pausing would only hold it longer), and nothing else can write between its slices.
  it('when the records are dense, then a slice reads a bounded part of them and the pass pauses between slices', async () => {
    const ws = await pricedWorkspace('bounded');
    const finish = await runWithSteps(ws.id, 12);
    for (let i = 0; i < 12; i++) await finish(i);
    await stores.db.query(
      `UPDATE steps SET finished_at = greatest(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', now() - sequence * interval '5 minutes')
       WHERE workspace_id = $1`,
      [ws.id],
    );
    let pauses = 0;
    const found = await tally(2, async () => void pauses++);
    expect(found.slices).toBeGreaterThan(4);
    expect(pauses).toBeGreaterThan(3);
    expect(found.usage.filter(mine(ws.id))).toEqual([]);
  });

  it.runIf(backend !== 'embedded')(
    'when steps finish, stamped earlier, and runs start between its slices, then the pass reads one snapshot: no drift, and none after',
    async () => {
      const ws = await pricedWorkspace('moving');
      // Results stamped by a daemon clock 20 minutes behind (or written late): their finishes fall
      // in slices already read. Read committed, the counters read at the end would have them and
      // the tally not: a drift that is none.
      const midnight = Date.parse(`${today()}T00:00:00Z`);
      const behind = new GuardService(
        stores.db,
        stores.counters,
        { now: () => new Date(Math.max(midnight + 60_000, Date.now() - 20 * 60_000)) },
        createLogger('silent'),
      );
      const finish = await runWithSteps(ws.id, 6, 'u', behind);
      for (const i of [0, 1, 2]) await finish(i);
      // Finished 40, 10 and 5 minutes ago: the slices pass the late results' instant at the second.
      await stores.db.query(
        `UPDATE steps SET finished_at = greatest($2::timestamptz, now() - (ARRAY[40, 10, 5])[sequence] * interval '1 minute')
         WHERE workspace_id = $1 AND sequence <= 3`,
        [ws.id, new Date(midnight)],
      );
      let pauses = 0;
      let next = 3;
      const found = await tally(1, async () => {
        if (++pauses !== 2) return;
        while (next < 6) await finish(next++);
        await guard.startRun(ws.id, { user_id: 'late' });
      });
      expect(next).toBe(6);
      expect([...found.usage, ...found.userUsage, ...found.subjectUsage].filter(mine(ws.id))).toEqual([]);
      const after = await tally(20_000);
      expect([...after.usage, ...after.userUsage, ...after.subjectUsage].filter(mine(ws.id))).toEqual([]);
    },
  );

  it('when a counter drifted, then the periodic pass reports and repairs it, and the next pass finds the counters exact', async () => {
    const ws = await pricedWorkspace('repair');
    const finish = await runWithSteps(ws.id, 3);
    for (let i = 0; i < 3; i++) await finish(i);
    await stores.db.query('UPDATE usage_daily SET spend_micros = 5 WHERE workspace_id = $1', [ws.id]);
    const first = await reconcileInSlices(stores.db, stores.counters, { now: clock.now(), days: 2, perSlice: 1 });
    expect(first.drifts.filter((d) => d.key.startsWith(ws.id) && d.kind === 'workspace_usage')).toEqual([
      {
        kind: 'workspace_usage',
        key: `${ws.id}/${today()}`,
        expected: 'spend=60000 runs=1',
        found: 'spend=5 runs=1',
      },
    ]);
    // More steps, then a pass: it catches up with them exactly.
    const more = await runWithSteps(ws.id, 2, 'v');
    await more(0);
    await more(1);
    const second = await reconcileInSlices(stores.db, stores.counters, { now: clock.now(), days: 2, perSlice: 1 });
    expect(second.drifts.filter((d) => d.key.startsWith(ws.id))).toEqual([]);
    expect(second.records).toBeGreaterThanOrEqual(7);
    const { rows } = await stores.db.query<{ spend_micros: string; runs: string }>(
      'SELECT spend_micros::text, runs::text FROM usage_daily WHERE workspace_id = $1',
      [ws.id],
    );
    expect(rows).toEqual([{ spend_micros: '100000', runs: '2' }]);
  });

  it.runIf(backend !== 'embedded')(
    "when another daemon's reconcile holds the lock, then the pass is skipped and reads nothing",
    async () => {
      let release!: () => void;
      let locked!: () => void;
      const held = new Promise<void>((resolve) => (locked = resolve));
      const holder = stores.db.transaction(async (tx) => {
        await lockForTransaction(tx, 'reconcile');
        locked();
        await new Promise<void>((resolve) => (release = resolve));
      });
      await held;
      const report = await reconcileInSlices(stores.db, stores.counters, { now: clock.now(), days: 2 });
      release();
      await holder;
      expect(report).toMatchObject({ skipped: true, drifts: [] });
    },
  );
});
