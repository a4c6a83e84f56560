/**
 * A run's totals (step count, tokens, cost) are kept with its steps' writes, not summed when read:
 * against real Postgres and the embedded database, steps written at once by two daemons (proxied
 * and client sequences, taken sequences, blocked steps, steps refused by an ended run) and their
 * results leave each run's totals equal to its steps' sums, on the run list and the run detail. A
 * run from before the totals were kept is summed from its steps, and stays so.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import type { Decision } from '../../src/rules/engine.js';
import { systemClock } from '../../src/clock.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { insertSteps, type NewStep } from '../../src/store/runs.js';
import { finishSteps } from '../../src/store/step-finish.js';
import { listRuns } from '../../src/store/run-list.js';
import { readRunDetail } from '../../src/store/run-detail.js';
import { migrate } from '../../src/store/migrations.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type TestStores } from '../support/harness.js';
import { runWithStep } from '../support/run-with-step.js';

const log = createLogger('silent');
const DENY: Decision = {
  outcome: 'DENY',
  reason: 'USER_BLOCKED',
  evaluated_rules: { kill_switch: 'PASS', user_blocked: 'DENY' },
};

describe.each(BACKENDS)('run totals on %s', (backend) => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores(backend);
  });
  afterAll(async () => {
    await stores?.close();
  });

  const workspace = async () => {
    const ws = await createWorkspace(stores.db, 'totals', 'enterprise');
    // Fractions of a microdollar per token: the totals must be the exact sums, not rounded ones.
    await stores.db.query(
      `INSERT INTO model_pricing (id, workspace_id, model, input_cost_per_token, output_cost_per_token)
       VALUES (gen_random_uuid(), $1, 'm', 0.0000015, 0.0000107)`,
      [ws.id],
    );
    return ws.id;
  };
  /** What the totals must be: the steps' sums, as reads computed them before the totals were kept. */
  const summed = async (runId: string) => {
    const { rows } = await stores.db.query<{ step_count: string; total_tokens: string; total_cost_usd: string }>(
      `SELECT count(*) AS step_count, coalesce(sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)), 0) AS total_tokens,
         coalesce(sum(cost_usd), 0) AS total_cost_usd FROM steps WHERE run_id = $1`,
      [runId],
    );
    const r = rows[0]!;
    return {
      step_count: Number(r.step_count),
      total_tokens: Number(r.total_tokens),
      total_cost_usd: Number(r.total_cost_usd),
    };
  };
  const listed = async (ws: string) => {
    const { items } = await listRuns(stores.db, ws, { status: null, userId: null, page: 1, perPage: 100 });
    return new Map(
      items.map((r) => [
        r.id,
        { step_count: r.step_count, total_tokens: r.total_tokens, total_cost_usd: r.total_cost_usd },
      ]),
    );
  };
  const detail = async (ws: string, runId: string) => {
    const body = await readRunDetail(stores.db, ws, runId, new Date());
    const pieces: Buffer[] = [];
    for await (const piece of body!) pieces.push(piece);
    return JSON.parse(Buffer.concat(pieces).toString()) as {
      step_count: number;
      total_tokens: number;
      total_cost_usd: number;
      steps: unknown[];
    };
  };
  const detailed = async (ws: string, runId: string) => {
    const run = await detail(ws, runId);
    expect(run.steps).toHaveLength(run.step_count);
    return { step_count: run.step_count, total_tokens: run.total_tokens, total_cost_usd: run.total_cost_usd };
  };
  const blockedStep = (ws: string, runId: string, sequence: number): NewStep => ({
    id: randomUUID(),
    runId,
    workspaceId: ws,
    sequence,
    type: 'MODEL_CALL',
    status: 'BLOCKED',
    model: 'm',
    toolName: null,
    inputData: null,
    decision: DENY,
    now: new Date(),
  });

  it("when two daemons write steps and results into runs at once, then each run's totals are its steps' sums, listed and in its detail", async () => {
    const ws = await workspace();
    const [a, b] = [0, 1].map(() => new GuardService(stores.db, stores.counters, systemClock, log)) as [
      GuardService,
      GuardService,
    ];
    const runIds = [(await a.startRun(ws, { user_id: 'u1' })).id, (await b.startRun(ws, { user_id: 'u2' })).id];
    // A proxied call's run starts with its step (counted in the run's own insert).
    const withFirst = await runWithStep(a, ws, { user_id: 'u3' }, { type: 'MODEL_CALL', model: 'm' });
    runIds.push(withFirst.run.id);
    const ended = (await a.startRun(ws, { user_id: 'u4' })).id;
    await a.createStep(ws, ended, { type: 'TOOL_CALL', tool_name: 't' });
    await a.endRun(ws, ended, 'COMPLETED');

    const calls = Array.from({ length: 60 }, async (_, i) => {
      const guard = i % 2 ? a : b;
      const runId = runIds[i % runIds.length]!;
      // Proxied (sequence allocated), or the client's own; every fifth a tool call with no tokens.
      const step =
        i % 3 === 0
          ? await guard.createStep(ws, runId, { type: 'MODEL_CALL', model: 'm', sequence: 1000 + i })
          : await guard.createStep(
              ws,
              runId,
              i % 5 === 0 ? { type: 'TOOL_CALL', tool_name: 't' } : { type: 'MODEL_CALL', model: 'm' },
            );
      if (i % 7 === 6) return; // never finished
      const result = {
        status: 'COMPLETED' as const,
        durationMs: 3,
        promptTokens: i % 5 === 0 ? null : 100 + i,
        completionTokens: i % 5 === 0 ? null : 7 * i,
      };
      await (i % 4 === 0
        ? guard.recordResult(ws, runId, step.id, result)
        : guard.finishStep(ws, runId, step.id, result));
    });
    // A sequence taken twice: the step refused is not counted.
    const taken = [b, a].map((guard) =>
      guard.createStep(ws, runIds[0]!, { type: 'TOOL_CALL', tool_name: 't', sequence: 5000 }).then(
        () => 'inserted',
        (error: { code?: string }) => error.code,
      ),
    );
    // Blocked steps count; a step into the ended run is refused and not counted.
    const direct = insertSteps(stores.db, [
      blockedStep(ws, runIds[1]!, 6000),
      blockedStep(ws, runIds[2]!, 6000),
      blockedStep(ws, ended, 6000),
    ]);
    await Promise.all(calls);
    expect((await Promise.all(taken)).sort()).toEqual(['DUPLICATE_SEQUENCE', 'inserted']);
    expect(await direct).toEqual(['inserted', 'inserted', 'run_not_running']);

    const list = await listed(ws);
    for (const runId of [...runIds, ended]) {
      const expected = await summed(runId);
      expect(list.get(runId)).toEqual(expected);
      expect(await detailed(ws, runId)).toEqual(expected);
    }
    // Something was counted in each: the sums are not all zero.
    expect((await summed(runIds[0]!)).total_cost_usd).toBeGreaterThan(0);
    expect((await summed(ended)).step_count).toBe(1);
  });

  it('when a run is from before the totals were kept, then it is summed from its steps, and steps written later keep it so', async () => {
    const ws = await workspace();
    const guard = new GuardService(stores.db, stores.counters, systemClock, log);
    const [before, kept] = [
      (await guard.startRun(ws, { user_id: 'u' })).id,
      (await guard.startRun(ws, { user_id: 'u' })).id,
    ];
    const stepOf = async (runId: string, sequence: number) => {
      const step: NewStep = {
        ...blockedStep(ws, runId, sequence),
        status: 'ALLOWED',
        decision: { outcome: 'ALLOW', reason: null, evaluated_rules: {} },
      };
      expect(await insertSteps(stores.db, [step])).toEqual(['inserted']);
      const now = new Date();
      await finishSteps(stores.db, [
        {
          workspaceId: ws,
          runId,
          stepId: step.id,
          now,
          day: now.toISOString().slice(0, 10),
          result: { status: 'COMPLETED', durationMs: 1, promptTokens: 10 * sequence, completionTokens: sequence },
        },
      ]);
    };
    for (const runId of [before, kept]) await stepOf(runId, 1);
    // As a database upgraded to migration 6 has it: no count, and no totals row.
    await stores.db.query('UPDATE runs SET step_count = NULL WHERE id = $1', [before]);
    await stores.db.query('DELETE FROM run_totals WHERE run_id = $1', [before]);
    for (const runId of [before, kept]) await stepOf(runId, 2);

    const list = await listed(ws);
    for (const runId of [before, kept]) {
      expect(list.get(runId)).toEqual({
        step_count: 2,
        total_tokens: 33,
        total_cost_usd: (await summed(runId)).total_cost_usd,
      });
      expect(await detailed(ws, runId)).toEqual(list.get(runId));
    }
    const { rows } = await stores.db.query<{ step_count: number | null }>('SELECT step_count FROM runs WHERE id = $1', [
      before,
    ]);
    expect(rows[0]!.step_count).toBeNull();

    // Kept totals are read, not the steps: a step written behind the daemon's back is summed
    // only in the run from before.
    for (const runId of [before, kept]) {
      await stores.db.query(
        `INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, decision, created_at)
         VALUES (gen_random_uuid(), $1, $2, 3, 'TOOL_CALL', 'ALLOWED', '{}', now())`,
        [runId, ws],
      );
    }
    const after = await listed(ws);
    expect(after.get(before)!.step_count).toBe(3);
    expect(after.get(kept)!.step_count).toBe(2);
    // The detail too, which still lists every step it finds.
    expect(await detail(ws, kept)).toMatchObject({ step_count: 2, steps: { length: 3 } });
    expect(await detail(ws, before)).toMatchObject({ step_count: 3, steps: { length: 3 } });
    // Kept totals are not written for a run from before: it would read only part of them if it ever became counted.
    const { rows: totals } = await stores.db.query('SELECT 1 FROM run_totals WHERE run_id = $1', [before]);
    expect(totals).toHaveLength(0);
  });

  it('when a daemon from before the totals starts a run while newer ones run, then the run is summed from its steps', async () => {
    const ws = await workspace();
    const guard = new GuardService(stores.db, stores.counters, systemClock, log);
    // An older daemon's insert names no step_count.
    const { rows } = await stores.db.query<{ id: string }>(
      `INSERT INTO runs (id, workspace_id, user_id, status, decision, started_at)
       VALUES (gen_random_uuid(), $1, 'old', 'RUNNING', '{"outcome":"ALLOW","reason":null,"evaluated_rules":{}}', now()) RETURNING id`,
      [ws],
    );
    const runId = rows[0]!.id;
    for (let i = 0; i < 3; i++) {
      const step = await guard.createStep(ws, runId, { type: 'MODEL_CALL', model: 'm' });
      await guard.finishStep(ws, runId, step.id, {
        status: 'COMPLETED',
        durationMs: 1,
        promptTokens: 10,
        completionTokens: 1,
      });
    }
    // And steps it writes, counted by nobody.
    await stores.db.query(
      `INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, prompt_tokens, decision, created_at)
       VALUES (gen_random_uuid(), $1, $2, 100, 'MODEL_CALL', 'COMPLETED', 5, '{}', now())`,
      [runId, ws],
    );
    const expected = await summed(runId);
    expect(expected).toMatchObject({ step_count: 4, total_tokens: 38 });
    expect((await listed(ws)).get(runId)).toEqual(expected);
    expect(await detailed(ws, runId)).toEqual(expected);
  });

  it('when a database migrated to version 6 (which gave step_count a default of 0) is migrated, then a run an older daemon starts is summed', async () => {
    const ws = await workspace();
    await stores.db.query('ALTER TABLE runs ALTER COLUMN step_count SET DEFAULT 0');
    await stores.db.query('DELETE FROM schema_migrations WHERE version = 7');
    expect(await migrate(stores.db)).toEqual([7]);
    const { rows } = await stores.db.query<{ step_count: number | null }>(
      `INSERT INTO runs (id, workspace_id, user_id, status, decision, started_at)
       VALUES (gen_random_uuid(), $1, 'old', 'RUNNING', '{}', now()) RETURNING step_count`,
      [ws],
    );
    expect(rows[0]!.step_count).toBeNull();
  });
});
