/**
 * The batch statements behind the step group commit, against real Postgres and the embedded
 * database: insertSteps answers per step (inserted, run not RUNNING, sequence taken) and writes
 * only the good ones; finishSteps prices each step, adds exactly the per-step rounded costs to the
 * workspaces' and users' day, and answers each step with the day's totals; input the database
 * refuses fails the whole statement and writes nothing.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import type { Decision } from '../../src/rules/engine.js';
import { type Clock } from '../../src/clock.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { recordedSpend, scopeAt } from '../../src/store/counters/counters.js';
import type { Db, Queryable } from '../../src/store/db.js';
import { insertSteps, type NewStep } from '../../src/store/runs.js';
import { finishSteps, type StepFinish } from '../../src/store/step-finish.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type TestStores } from '../support/harness.js';

const NOW = new Date('2026-05-04T12:00:00Z');
const DAY = '2026-05-04';
const clock: Clock = { now: () => NOW };
const ALLOW: Decision = { outcome: 'ALLOW', reason: null, evaluated_rules: {} };

/**
 * Prices with fractions of a microdollar per token, so a step's cost is often a half or a tenth
 * of a micro off: rounding per step then differs from rounding the sum, and the test can tell.
 * `micros` is the per-step cost rounded half-up, in integers.
 */
const PRICES = {
  // $1.5 and $2.5 per million tokens: 1.5 and 2.5 micros a token.
  a: { input: '0.0000015', output: '0.0000025', micros: (p: number, c: number) => Math.floor((3 * p + 5 * c + 1) / 2) },
  // $3 and $10.7 per million tokens.
  b: {
    input: '0.000003',
    output: '0.0000107',
    micros: (p: number, c: number) => Math.floor((30 * p + 107 * c + 5) / 10),
  },
};

describe.each(BACKENDS)('step batch statements on %s', (backend) => {
  let stores: TestStores;
  let guard: GuardService;
  beforeAll(async () => {
    stores = await openTestStores(backend);
    guard = new GuardService(stores.db, stores.counters, clock, createLogger('silent'));
  });
  afterAll(async () => {
    await stores?.close();
  });

  const workspace = async (price: keyof typeof PRICES = 'a') => {
    const ws = await createWorkspace(stores.db, 'batches', 'enterprise');
    await stores.db.query(
      `INSERT INTO model_pricing (id, workspace_id, model, input_cost_per_token, output_cost_per_token)
       VALUES (gen_random_uuid(), $1, 'm', $2, $3)`,
      [ws.id, PRICES[price].input, PRICES[price].output],
    );
    return ws.id;
  };
  const startRun = async (ws: string, user = 'u') => (await guard.startRun(ws, { user_id: user })).id;
  const newStep = (ws: string, runId: string, sequence: number, inputData: unknown = null): NewStep => ({
    id: randomUUID(),
    runId,
    workspaceId: ws,
    sequence,
    type: 'MODEL_CALL',
    status: 'ALLOWED',
    model: 'm',
    toolName: null,
    inputData,
    decision: ALLOW,
    now: NOW,
  });
  const finish = (
    ws: string,
    runId: string,
    stepId: string,
    promptTokens: number | null,
    completionTokens: number | null,
    outputData: unknown = { ok: true },
  ): StepFinish => ({
    workspaceId: ws,
    runId,
    stepId,
    now: NOW,
    day: DAY,
    result: { status: 'COMPLETED', durationMs: 5, promptTokens, completionTokens, outputData },
  });
  const stepsOf = async (runId: string) => {
    const { rows } = await stores.db.query<{ id: string; sequence: number; status: string; cost_usd: string | null }>(
      'SELECT id, sequence, status, cost_usd::text AS cost_usd FROM steps WHERE run_id = $1 ORDER BY sequence',
      [runId],
    );
    return rows.map((r) => ({ ...r, sequence: Number(r.sequence) }));
  };
  const spend = (ws: string, user: string) => recordedSpend(stores.db, scopeAt(NOW, ws, user));
  /** A step of the run, inserted and ALLOWED. */
  const allowedStep = async (ws: string, runId: string, sequence: number) => {
    const step = newStep(ws, runId, sequence);
    expect(await insertSteps(stores.db, [step])).toEqual(['inserted']);
    return step.id;
  };

  it('when a batch mixes a running run, an ended run, a missing run and taken sequences, then each step gets its own outcome and only the good ones are written', async () => {
    const ws = await workspace();
    const running = await startRun(ws);
    const ended = await startRun(ws);
    await allowedStep(ws, running, 1);
    await allowedStep(ws, ended, 1);
    await guard.endRun(ws, ended, 'COMPLETED');

    const batch = [
      newStep(ws, running, 2),
      newStep(ws, ended, 2),
      newStep(ws, running, 1), // taken before the batch
      newStep(ws, randomUUID(), 1), // no such run
      newStep(ws, running, 3),
      newStep(ws, running, 4),
      newStep(ws, running, 4), // taken in this very batch
    ];
    const outcomes = await insertSteps(stores.db, batch);

    expect(outcomes.slice(0, 5)).toEqual([
      'inserted',
      'run_not_running',
      'duplicate_sequence',
      'run_not_running',
      'inserted',
    ]);
    // Two steps wanting one sequence: either may win, exactly one does.
    expect([...outcomes.slice(5)].sort()).toEqual(['duplicate_sequence', 'inserted']);
    const winner = outcomes[5] === 'inserted' ? batch[5]! : batch[6]!;
    const written = await stepsOf(running);
    expect(written.map((s) => s.sequence)).toEqual([1, 2, 3, 4]);
    expect(written.slice(1).map((s) => s.id)).toEqual([batch[0]!.id, batch[4]!.id, winner.id]);
    expect((await stepsOf(ended)).map((s) => s.sequence)).toEqual([1]);
  });

  it('when steps are refused, then their outcomes come from the statement that wrote the others: nothing read after the commit can fail the batch', async () => {
    const ws = await workspace();
    const running = await startRun(ws);
    const ended = await startRun(ws);
    await allowedStep(ws, running, 1);
    await guard.endRun(ws, ended, 'COMPLETED');
    // The database goes away right after the first statement: a batch whose steps committed must
    // still be answered, each step as it fared.
    let statements = 0;
    const failingAfterOne = {
      ...stores.db,
      query: (sql: string, params?: readonly unknown[]) =>
        ++statements === 1
          ? stores.db.query(sql, params)
          : Promise.reject(Object.assign(new Error('Connection terminated unexpectedly'), { code: 'ECONNRESET' })),
    } as Queryable;
    const batch = [
      newStep(ws, running, 2),
      newStep(ws, running, 1),
      newStep(ws, ended, 1),
      newStep(ws, running.toUpperCase(), 3),
    ];
    expect(await insertSteps(failingAfterOne, batch)).toEqual([
      'inserted',
      'duplicate_sequence',
      'run_not_running',
      'inserted',
    ]);
    expect(statements).toBe(1);
    expect((await stepsOf(running)).map((s) => s.id)).toEqual([expect.any(String), batch[0]!.id, batch[3]!.id]);
  });

  it('when a step names a running run of another workspace, then it is refused as not running and not written', async () => {
    const ws = await workspace();
    const other = await workspace();
    const theirs = await startRun(other);
    const outcomes = await insertSteps(stores.db, [newStep(ws, theirs, 1), newStep(other, theirs, 2)]);
    expect(outcomes).toEqual(['run_not_running', 'inserted']);
    expect((await stepsOf(theirs)).map((s) => s.sequence)).toEqual([2]);
  });

  it('when a batch finishes priced steps of two users in two workspaces, then the day gains exactly the per-step rounded costs and each answer carries the totals', async () => {
    const [wa, wb] = [await workspace('a'), await workspace('b')];
    const runs = { a1: await startRun(wa, 'u1'), a2: await startRun(wa, 'u2'), b1: await startRun(wb, 'u1') };
    // Spend before the batch: the totals answered must build on it.
    const earlier = await allowedStep(wa, runs.a1, 1);
    const [before] = await finishSteps(stores.db, [finish(wa, runs.a1, earlier, 1000, 1)]);
    expect(before).toMatchObject({ cost_micros: PRICES.a.micros(1000, 1), status: 'COMPLETED' });

    // [workspace, run, user, prompt tokens, completion tokens]
    const plan = [
      [wa, runs.a1, 'u1', 1, 0],
      [wa, runs.a1, 'u1', 3, 1],
      [wa, runs.a1, 'u1', 1, 1],
      [wa, runs.a2, 'u2', 1, 0],
      [wa, runs.a2, 'u2', 7, 3],
      [wa, runs.a2, 'u2', 0, 1],
      [wb, runs.b1, 'u1', 1, 1],
      [wb, runs.b1, 'u1', 2, 3],
      [wb, runs.b1, 'u1', 5, 0],
    ] as const;
    const sequences = new Map<string, number>([[runs.a1, 1]]);
    const steps: { ws: string; runId: string; user: string; p: number; c: number; id: string; micros: number }[] = [];
    for (const [ws, runId, user, p, c] of plan) {
      const sequence = (sequences.get(runId) ?? 0) + 1;
      sequences.set(runId, sequence);
      steps.push({
        ws,
        runId,
        user,
        p,
        c,
        id: await allowedStep(ws, runId, sequence),
        micros: PRICES[ws === wa ? 'a' : 'b'].micros(p, c),
      });
    }
    const unpriced = await allowedStep(wa, runs.a2, 99); // finished without token counts: costs nothing

    const results = await finishSteps(stores.db, [
      ...steps.map((s) => finish(s.ws, s.runId, s.id, s.p, s.c)),
      finish(wa, runs.a2, unpriced, null, null),
      finish(wa, runs.a1, steps[0]!.id, 500_000, 500_000), // named again in the batch: finished once, by the first
      finish(wa, runs.a1, earlier, 10, 10), // already finished
      finish(wa, runs.a1, randomUUID(), 10, 10), // no such step
      finish(wb, runs.a1, steps[1]!.id, 10, 10), // a step of another workspace
    ]);

    const total = (ws: string, user?: string) =>
      steps
        .filter((s) => s.ws === ws && (user === undefined || s.user === user))
        .reduce((sum, s) => sum + s.micros, 0) + (ws === wa && user !== 'u2' ? before!.cost_micros : 0);
    const expected = {
      a: { ws: total(wa), u1: total(wa, 'u1'), u2: total(wa, 'u2') },
      b: { ws: total(wb), u1: total(wb, 'u1') },
    };
    // The data is chosen so that per-step rounding matters: rounding the exact sum would differ.
    const exactA = steps.filter((s) => s.ws === wa).reduce((sum, s) => sum + 1.5 * s.p + 2.5 * s.c, 0);
    expect(expected.a.ws - before!.cost_micros).not.toBe(Math.round(exactA));

    steps.forEach((s, i) => {
      const totals =
        s.ws === wa
          ? {
              workspaceDailySpendMicros: expected.a.ws,
              userDailySpendMicros: s.user === 'u1' ? expected.a.u1 : expected.a.u2,
            }
          : { workspaceDailySpendMicros: expected.b.ws, userDailySpendMicros: expected.b.u1 };
      expect(results[i], `step ${i}`).toEqual({
        id: s.id,
        status: 'COMPLETED',
        user_id: s.user,
        cost_micros: s.micros,
        totals,
      });
    });
    expect(results[steps.length]).toEqual({
      id: unpriced,
      status: 'COMPLETED',
      user_id: 'u2',
      cost_micros: 0,
      totals: null,
    });
    expect(results.slice(steps.length + 1)).toEqual([null, null, null, null]);

    // The records: what the day holds, and what the steps say they cost, rounded per step.
    expect(await spend(wa, 'u1')).toEqual({
      workspaceDailySpendMicros: expected.a.ws,
      userDailySpendMicros: expected.a.u1,
    });
    expect(await spend(wa, 'u2')).toEqual({
      workspaceDailySpendMicros: expected.a.ws,
      userDailySpendMicros: expected.a.u2,
    });
    expect(await spend(wb, 'u1')).toEqual({
      workspaceDailySpendMicros: expected.b.ws,
      userDailySpendMicros: expected.b.u1,
    });
    const { rows } = await stores.db.query<{ workspace_id: string; micros: string }>(
      `SELECT workspace_id, sum(least(round(cost_usd * 1000000), 1000000000000000))::text AS micros
       FROM steps WHERE workspace_id = ANY($1::uuid[]) AND cost_usd IS NOT NULL GROUP BY workspace_id`,
      [[wa, wb]],
    );
    expect(Object.fromEntries(rows.map((r) => [r.workspace_id, Number(r.micros)]))).toEqual({
      [wa]: expected.a.ws,
      [wb]: expected.b.ws,
    });
    // The duplicate's tokens were not applied; the step of the other workspace was left alone.
    const first = (await stepsOf(runs.a1)).find((s) => s.id === steps[0]!.id)!;
    expect(first.cost_usd).not.toBeNull();
    expect(Number(first.cost_usd)).toBeCloseTo(1.5e-6, 12);
  });

  it('when a step is named twice before others in a batch, then each of the others still gets its own answer', async () => {
    const ws = await workspace();
    const runId = await startRun(ws);
    const [a, b, c] = [
      await allowedStep(ws, runId, 1),
      await allowedStep(ws, runId, 2),
      await allowedStep(ws, runId, 3),
    ];
    const results = await finishSteps(stores.db, [
      finish(ws, runId, a, 10, 10),
      finish(ws, runId, a.toUpperCase(), 20, 20), // the same step again, spelled otherwise
      finish(ws, runId, b, 10, 10),
      finish(ws, runId, c, 10, 10),
    ]);
    expect(results.map((result) => result?.id ?? null)).toEqual([a, null, b, c]);
  });

  it("when a batch names a step from another workspace or run first, then that mention does not take the step's own finish", async () => {
    const [ws, other] = [await workspace(), await workspace()];
    const runId = await startRun(ws);
    const otherRun = await startRun(ws);
    const stepId = await allowedStep(ws, runId, 1);
    const results = await finishSteps(stores.db, [
      finish(other, runId, stepId, 10, 10),
      finish(ws, otherRun, stepId, 10, 10),
      finish(ws, runId, stepId, 100, 100),
      finish(ws, runId, stepId, 1, 1), // the owner's second mention: finished once, by the first
    ]);
    expect(results).toEqual([
      null,
      null,
      {
        id: stepId,
        status: 'COMPLETED',
        user_id: 'u',
        cost_micros: PRICES.a.micros(100, 100),
        totals: {
          workspaceDailySpendMicros: PRICES.a.micros(100, 100),
          userDailySpendMicros: PRICES.a.micros(100, 100),
        },
      },
      null,
    ]);
    expect((await stepsOf(runId)).map((s) => s.status)).toEqual(['COMPLETED']);
  });

  it('when one finish in a batch carries output the database refuses, then the whole statement fails and nothing is written', async () => {
    const ws = await workspace();
    const runId = await startRun(ws);
    const ids = [await allowedStep(ws, runId, 1), await allowedStep(ws, runId, 2), await allowedStep(ws, runId, 3)];
    const batch = ids.map((id, i) =>
      finish(ws, runId, id, 100, 100, i === 1 ? { text: 'nul \u0000 here' } : { text: 'fine' }),
    );

    const error = await finishSteps(stores.db, batch).then(
      () => null,
      (e: { code?: string }) => e,
    );
    expect(error?.code).toMatch(/^22/); // data exception
    expect((await stepsOf(runId)).map((s) => s.status)).toEqual(['ALLOWED', 'ALLOWED', 'ALLOWED']);
    expect(await spend(ws, 'u')).toEqual({ workspaceDailySpendMicros: 0, userDailySpendMicros: 0 });

    // Without it, the others go through.
    const results = await finishSteps(stores.db, [batch[0]!, batch[2]!]);
    expect(results.map((r) => r?.cost_micros)).toEqual([PRICES.a.micros(100, 100), PRICES.a.micros(100, 100)]);
  });

  it('when a model name holds half of an emoji (cut at a length limit), then it is stored with U+FFFD, not refused', async () => {
    const ws = await workspace();
    const runId = await startRun(ws);
    const cut = { ...newStep(ws, runId, 1), model: 'gpt-\u{1F600}'.slice(0, 5), toolName: '\uDE00tool' };
    expect(await insertSteps(stores.db, [cut, newStep(ws, runId, 2)])).toEqual(['inserted', 'inserted']);
    const { rows } = await stores.db.query<{ model: string; tool_name: string }>(
      'SELECT model, tool_name FROM steps WHERE id = $1',
      [cut.id],
    );
    expect(rows[0]).toEqual({ model: 'gpt-\uFFFD', tool_name: '\uFFFDtool' });
  });

  it('when one new step in a batch carries input the database refuses, then the whole statement fails and no step is written', async () => {
    const ws = await workspace();
    const runId = await startRun(ws);
    const batch = [
      newStep(ws, runId, 1, { q: 'ok' }),
      newStep(ws, runId, 2, { q: 'nul \u0000' }),
      newStep(ws, runId, 3),
    ];
    const error = await insertSteps(stores.db, batch).then(
      () => null,
      (e: { code?: string }) => e,
    );
    expect(error?.code).toMatch(/^22/);
    expect(await stepsOf(runId)).toEqual([]);
  });

  /**
   * What `statement` reads of `table`, in the plan `planMode` forces: a prepared statement runs
   * custom plans first and may then keep a generic one; both must look rows up by key.
   */
  const readsOf = async (table: string, planMode: string, statement: (tx: Queryable) => Promise<unknown>) =>
    stores.db.transaction(async (tx) => {
      // The transaction's own counts (the embedded database's include its earlier statements).
      const counts = async () =>
        (
          await tx.query<{ seq: string; idx: string; fetched: string }>(
            `SELECT seq_scan AS seq, idx_scan AS idx, coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0) AS fetched
         FROM pg_stat_xact_user_tables WHERE relname = $1`,
            [table],
          )
        ).rows[0]!;
      await tx.query(`SET LOCAL plan_cache_mode = ${planMode}`);
      const before = await counts();
      await statement(tx);
      const after = await counts();
      return {
        seqScans: Number(after.seq) - Number(before.seq),
        indexScans: Number(after.idx) - Number(before.idx),
        rowsRead: Number(after.fetched) - Number(before.fetched),
      };
    });
  const PLAN_MODES = ['force_custom_plan', 'force_generic_plan'];

  // Postgres takes any json_to_recordset for 100 rows. Planned for 100 finishes, a steps table of
  // 20,000 rows was read in full on every finish (each one cost more as the table grew, until it
  // was large enough for the index to look cheaper).
  it.each(PLAN_MODES)(
    'when the steps table holds 20,000 steps, then finishing one reads it by index, not in full (%s)',
    async (planMode) => {
      const ws = await workspace();
      const runId = await startRun(ws);
      await stores.db.query(
        `INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, model, decision, created_at)
         SELECT gen_random_uuid(), $1, $2, n, 'MODEL_CALL', 'COMPLETED', 'm', '{}', $3 FROM generate_series(2, 20001) n`,
        [runId, ws, NOW],
      );
      await stores.db.query('ANALYZE steps');
      const stepId = await allowedStep(ws, runId, 1);
      const reads = await readsOf('steps', planMode, async (tx) => {
        expect(await finishSteps(tx, [finish(ws, runId, stepId, 10, 5)])).toMatchObject([
          { id: stepId, status: 'COMPLETED' },
        ]);
      });
      expect(reads.seqScans).toBe(0);
      expect(reads.indexScans).toBeGreaterThan(0);
      expect(reads.rowsRead).toBeLessThan(10);
    },
  );

  // Planned for 100 new steps, every RUNNING run was read and hashed against the batch.
  it.each(PLAN_MODES)(
    'when 3,000 runs are running, then inserting one step reads its own run, not all of them (%s)',
    async (planMode) => {
      const ws = await workspace();
      const runId = await startRun(ws);
      await stores.db.query(
        `INSERT INTO runs (id, workspace_id, user_id, status, decision, started_at)
         SELECT gen_random_uuid(), $1, 'u' || n % 50, 'RUNNING', '{}', $2 FROM generate_series(1, 3000) n`,
        [ws, NOW],
      );
      await stores.db.query('ANALYZE runs');
      const step = newStep(ws, runId, 1);
      const reads = await readsOf('runs', planMode, async (tx) => {
        expect(await insertSteps(tx, [step])).toEqual(['inserted']);
      });
      expect(reads.seqScans).toBe(0);
      // The step's run, under its lock, again for the foreign key, and for its count.
      expect(reads.rowsRead).toBeLessThan(10);
    },
  );

  describe('through GuardService (steps share statements)', () => {
    /**
     * The database the service writes through, with each batch statement's step ids recorded: to
     * know the writes really were grouped. It only watches; every query reaches the real store.
     */
    const watched = () => {
      const batches = { inserts: [] as string[][], finishes: [] as string[][] };
      const db: Db = {
        ...stores.db,
        query: <R>(sql: string, params?: readonly unknown[]) => {
          // Each batch statement takes its rows as one JSON document.
          const rows = () => JSON.parse(params![0] as string) as { id?: string; step_id?: string }[];
          if (sql.includes('INSERT INTO steps')) batches.inserts.push(rows().map((r) => r.id!));
          if (sql.includes('UPDATE steps s SET status')) batches.finishes.push(rows().map((r) => r.step_id!));
          return stores.db.query<R>(sql, params);
        },
      };
      return { batches, guard: new GuardService(db, stores.counters, clock, createLogger('silent')) };
    };
    const result = (p: number, c: number, outputData: unknown = { ok: true }) => ({
      status: 'COMPLETED' as const,
      durationMs: 3,
      promptTokens: p,
      completionTokens: c,
      outputData,
    });
    const outcome = (p: Promise<{ id: string }>) =>
      p.then(
        (a) => a.id,
        (e: { code?: string }) => ({ code: e.code }),
      );

    it('when ten results are finished at once and one carries output the database refuses, then only that one fails', async () => {
      const { guard: watchedGuard, batches } = watched();
      const bad = 4;
      // The case needs the bad result in a statement with good ones. Which results share one
      // depends on when each reaches the group commit (its reads before it may answer in any
      // order); a try where the bad one went alone is checked all the same, then tried again.
      let shared = false;
      for (let attempt = 1; attempt <= 5 && !shared; attempt++) {
        const ws = await workspace();
        const runId = await startRun(ws);
        const ids: string[] = [];
        for (let i = 1; i <= 10; i++) ids.push(await allowedStep(ws, runId, i));
        batches.finishes.length = 0;

        const outcomes = await Promise.all(
          ids.map((id, i) =>
            outcome(
              watchedGuard.finishStep(
                ws,
                runId,
                id,
                result(100 + i, i, i === bad ? { text: 'nul \u0000 here' } : { text: 'fine' }),
              ),
            ),
          ),
        );

        expect(outcomes[bad]).toEqual({ code: expect.stringMatching(/^22/) });
        expect(outcomes.filter((_, i) => i !== bad)).toEqual(ids.filter((_, i) => i !== bad));
        const written = await stepsOf(runId);
        expect(written.map((s) => s.status)).toEqual(ids.map((_, i) => (i === bad ? 'ALLOWED' : 'COMPLETED')));
        const expected = ids.reduce((sum, _, i) => (i === bad ? sum : sum + PRICES.a.micros(100 + i, i)), 0);
        const both = { workspaceDailySpendMicros: expected, userDailySpendMicros: expected };
        expect(await spend(ws, 'u')).toEqual(both);
        expect(await stores.counters.readSpend(scopeAt(NOW, ws, 'u'))).toEqual(both);
        // When the bad result shared a statement with good ones, they were saved by being retried alone.
        shared = batches.finishes.some((b) => b.length > 1 && b.includes(ids[bad]!));
      }
      expect(shared).toBe(true);
    });

    it('when ten steps are created at once and one carries input the database refuses, then only that one fails', async () => {
      const { guard: watchedGuard, batches } = watched();
      const ws = await workspace();
      const runId = await startRun(ws);
      const bad = 6;

      const outcomes = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          outcome(
            watchedGuard.createStep(ws, runId, {
              type: 'MODEL_CALL',
              model: 'm',
              input_data: i === bad ? { q: 'nul \u0000' } : { q: `ok ${i}` },
            }),
          ),
        ),
      );

      expect(outcomes[bad]).toEqual({ code: expect.stringMatching(/^22/) });
      const good = outcomes.filter((_, i) => i !== bad) as string[];
      expect(good.every((id) => typeof id === 'string')).toBe(true);
      expect(batches.inserts.some((b) => b.length > 1)).toBe(true);
      const written = await stepsOf(runId);
      expect(written.map((s) => s.id).sort()).toEqual([...good].sort());
      expect(new Set(written.map((s) => s.sequence)).size).toBe(9);
    });

    it("when proxied results are recorded, then each is written with its cost, the copy holds the day's total, and a repeated or unknown step answers as finishStep does", async () => {
      const ws = await workspace();
      const runId = await startRun(ws, 'proxied');
      const scope = scopeAt(NOW, ws, 'proxied');
      expect(await stores.counters.readSpend(scope)).toEqual({ workspaceDailySpendMicros: 0, userDailySpendMicros: 0 });
      const ids = [];
      for (const sequence of [1, 2, 3, 4, 5]) ids.push(await allowedStep(ws, runId, sequence));
      const tokens = (i: number) => [100 + i, 10 * i] as const;

      const answers = await Promise.all(ids.map((id, i) => guard.recordResult(ws, runId, id, result(...tokens(i)))));

      // The service's answer also carries what the call's log line needs: its user and cost.
      expect(answers).toEqual(
        ids.map((id, i) => ({ id, status: 'COMPLETED', userId: 'proxied', costMicros: PRICES.a.micros(...tokens(i)) })),
      );
      expect((await stepsOf(runId)).every((s) => s.status === 'COMPLETED')).toBe(true);
      const expected = ids.reduce((sum, _, i) => sum + PRICES.a.micros(...tokens(i)), 0);
      const both = { workspaceDailySpendMicros: expected, userDailySpendMicros: expected };
      expect(await spend(ws, 'proxied')).toEqual(both);
      expect(await stores.counters.readSpend(scope)).toEqual(both);
      await expect(guard.recordResult(ws, runId, ids[0]!, result(1, 1))).rejects.toMatchObject({
        code: 'STEP_ALREADY_FINISHED',
      });
      await expect(guard.recordResult(ws, runId, randomUUID(), result(1, 1))).rejects.toMatchObject({
        code: 'STEP_NOT_FOUND',
      });
    });

    it('when the service settles, then results still waiting for company are written first', async () => {
      const ws = await workspace();
      const runId = await startRun(ws);
      const first = await allowedStep(ws, runId, 1);
      const second = await allowedStep(ws, runId, 2);
      // A batch has just gone: the next result waits for the interval before it is written.
      await guard.recordResult(ws, runId, first, result(1, 1));
      const waiting = guard.recordResult(ws, runId, second, result(1, 1));
      await guard.settled();
      expect((await stepsOf(runId)).map((s) => s.status)).toEqual(['COMPLETED', 'COMPLETED']);
      expect((await waiting).status).toBe('COMPLETED');
    });

    it('when 40 priced steps are created and finished at once in one run, then each gets its own sequence and the day gains exactly their costs', async () => {
      const { guard: watchedGuard, batches } = watched();
      const ws = await workspace();
      const runId = await startRun(ws, 'busy');
      const scope = scopeAt(NOW, ws, 'busy');
      // Read once first: a Redis copy then exists, and only the writes below can raise it.
      expect(await stores.counters.readSpend(scope)).toEqual({ workspaceDailySpendMicros: 0, userDailySpendMicros: 0 });
      const tokens = (i: number) => [101 + 2 * i, i % 3 === 0 ? 0 : 7 * i + 1] as const;

      const pairs = await Promise.all(
        Array.from({ length: 40 }, async (_, i) => {
          const step = await watchedGuard.createStep(ws, runId, { type: 'MODEL_CALL', model: 'm' });
          const [p, c] = tokens(i);
          const finished = await watchedGuard.finishStep(ws, runId, step.id, result(p, c));
          return { ...step, finished: finished.status, micros: PRICES.a.micros(p, c) };
        }),
      );

      expect(pairs.every((s) => s.finished === 'COMPLETED')).toBe(true);
      expect(new Set(pairs.map((s) => s.sequence)).size).toBe(40);
      const written = await stepsOf(runId);
      expect(written.map((s) => s.id).sort()).toEqual(pairs.map((s) => s.id).sort());
      expect(written.map((s) => s.sequence)).toEqual(pairs.map((s) => s.sequence).sort((a, b) => a - b));
      expect(written.every((s) => s.status === 'COMPLETED')).toBe(true);
      // Grouped: fewer statements than calls.
      expect(Math.max(...batches.inserts.map((b) => b.length))).toBeGreaterThan(1);
      expect(Math.max(...batches.finishes.map((b) => b.length))).toBeGreaterThan(1);

      const expected = pairs.reduce((sum, s) => sum + s.micros, 0);
      const both = { workspaceDailySpendMicros: expected, userDailySpendMicros: expected };
      expect(await spend(ws, 'busy')).toEqual(both);
      expect(await stores.counters.readSpend(scope)).toEqual(both);
      await watchedGuard.settled();
    });
  });
});
