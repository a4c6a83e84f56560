/**
 * What a run's cost and status leave out, kept for the run list (migration 25): its unpriced model
 * calls (tokens, no price: counted $0) and its denied steps with the last one's reason. Written by
 * the batch of finishes and the batch of step inserts (and a proxied call's run started with its
 * step), read from the steps for a run from before the totals were kept, and backfilled for the
 * runs written before the migration.
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
import { migrate } from '../../src/store/migrations.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type TestStores } from '../support/harness.js';
import { runWithStep } from '../support/run-with-step.js';

const log = createLogger('silent');
const ALLOW: Decision = { outcome: 'ALLOW', reason: null, evaluated_rules: {} };
const deny = (reason: 'RUN_STEP_LIMIT_EXCEEDED' | 'TOOL_NOT_ALLOWED'): Decision => ({
  outcome: 'DENY',
  reason,
  evaluated_rules: {},
});

describe.each(BACKENDS)('unpriced calls and denials of a run on %s', (backend) => {
  let stores: TestStores;
  let guard: GuardService;
  let ws: string;
  beforeAll(async () => {
    stores = await openTestStores(backend);
    guard = new GuardService(stores.db, stores.counters, systemClock, log);
    ws = (await createWorkspace(stores.db, 'denials', 'enterprise')).id;
    await stores.db.query(
      `INSERT INTO model_pricing (id, workspace_id, model, input_cost_per_token, output_cost_per_token)
       VALUES (gen_random_uuid(), $1, 'priced', 0.000001, 0.000002)`,
      [ws],
    );
  });
  afterAll(async () => {
    await stores?.close();
  });

  const step = (runId: string, sequence: number, fields: Partial<NewStep> = {}): NewStep => ({
    id: randomUUID(),
    runId,
    workspaceId: ws,
    sequence,
    type: 'MODEL_CALL',
    status: 'ALLOWED',
    model: 'priced',
    toolName: null,
    inputData: null,
    decision: ALLOW,
    now: new Date(),
    ...fields,
  });
  const finish = (runId: string, stepId: string, tokens: number | null) => {
    const now = new Date();
    return {
      workspaceId: ws,
      runId,
      stepId,
      now,
      day: now.toISOString().slice(0, 10),
      result: { status: 'COMPLETED' as const, durationMs: 1, promptTokens: tokens, completionTokens: tokens },
    };
  };
  const listed = async (runId: string, workspaceId = ws) => {
    const { items } = await listRuns(stores.db, workspaceId, { status: null, userId: null, page: 1, perPage: 100 });
    const run = items.find((item) => item.id === runId)!;
    return {
      total_cost_usd: run.total_cost_usd,
      unpriced_calls: run.unpriced_calls,
      denied_steps: run.denied_steps,
      denial_reason: run.denial_reason,
    };
  };
  const startRun = async () => (await guard.startRun(ws, { user_id: 'u' })).id;

  /** A run of priced, unpriced and tool calls and two denials, in two batches of each write. */
  async function mixedRun() {
    const runId = await startRun();
    const steps = [
      step(runId, 1),
      step(runId, 2, { model: 'unpriced-a' }),
      step(runId, 3, { model: 'unpriced-b' }),
      step(runId, 4, { type: 'TOOL_CALL', model: null, toolName: 't' }),
      step(runId, 5, { model: 'unpriced-a' }),
    ];
    // Two batches, a second apart; the second's denials out of sequence order: the last denial
    // is the latest batch's highest sequence.
    const later = { now: new Date(Date.now() + 1000) };
    const denied = [
      step(runId, 6, { status: 'BLOCKED', decision: deny('TOOL_NOT_ALLOWED') }),
      step(runId, 9, { status: 'BLOCKED', decision: deny('RUN_STEP_LIMIT_EXCEEDED'), ...later }),
      step(runId, 8, { status: 'BLOCKED', decision: deny('TOOL_NOT_ALLOWED'), ...later }),
    ];
    expect(await insertSteps(stores.db, [steps[0]!, steps[1]!, denied[0]!, steps[2]!])).toEqual(
      Array(4).fill('inserted'),
    );
    expect(await insertSteps(stores.db, [denied[1]!, steps[3]!, denied[2]!, steps[4]!])).toEqual(
      Array(4).fill('inserted'),
    );
    await finishSteps(stores.db, [finish(runId, steps[0]!.id, 10), finish(runId, steps[1]!.id, 10)]);
    await finishSteps(stores.db, [
      finish(runId, steps[2]!.id, 0), // no tokens counted, but counted: its cost is still unknown
      finish(runId, steps[3]!.id, null), // a tool call: no tokens, not a model call
      finish(runId, steps[4]!.id, 5),
    ]);
    return runId;
  }
  const EXPECTED = {
    total_cost_usd: 0.00003,
    unpriced_calls: 3,
    denied_steps: 3,
    denial_reason: 'RUN_STEP_LIMIT_EXCEEDED',
  };

  it('when a run has unpriced calls and denied steps, then the list counts them and names the last denial', async () => {
    const runId = await mixedRun();
    expect(await listed(runId)).toEqual(EXPECTED);
    // Kept, not summed on read: the run keeps its totals.
    const { rows } = await stores.db.query(
      'SELECT r.denied_steps, r.last_denial, t.unpriced_calls FROM runs r JOIN run_totals t ON t.run_id = r.id WHERE r.id = $1',
      [runId],
    );
    expect(rows[0]).toEqual({ denied_steps: 3, last_denial: 'RUN_STEP_LIMIT_EXCEEDED', unpriced_calls: 3 });
  });

  it('when nothing was unpriced or denied, then the list says so', async () => {
    const runId = await startRun();
    const first = step(runId, 1);
    await insertSteps(stores.db, [first]);
    await finishSteps(stores.db, [finish(runId, first.id, 100)]);
    expect(await listed(runId)).toEqual({
      total_cost_usd: 0.0003,
      unpriced_calls: 0,
      denied_steps: 0,
      denial_reason: null,
    });
  });

  it("when a run is blocked at its start, or a proxied call's run is started with its step denied, then the list names why", async () => {
    await stores.db.query("INSERT INTO sdk_users (workspace_id, user_id, blocked) VALUES ($1, 'blocked', true)", [ws]);
    const blocked = await guard.startRun(ws, { user_id: 'blocked' });
    expect(blocked.status).toBe('BLOCKED');
    expect(await listed(blocked.id)).toMatchObject({ denied_steps: 0, denial_reason: 'USER_BLOCKED' });

    // A workspace that denies every tool, set before the guard first reads it.
    const strict = (await createWorkspace(stores.db, 'strict', 'enterprise')).id;
    await stores.db.query(`UPDATE workspaces SET tool_policy = '{"deny": ["*"], "allow": null}' WHERE id = $1`, [
      strict,
    ]);
    const proxied = await runWithStep(guard, strict, { user_id: 'u' }, { type: 'TOOL_CALL', tool_name: 'shell.rm' });
    expect(proxied.run.status).toBe('RUNNING');
    expect(proxied.step?.status).toBe('BLOCKED');
    expect(await listed(proxied.run.id, strict)).toMatchObject({ denied_steps: 1, denial_reason: 'TOOL_NOT_ALLOWED' });
  });

  it('when a run is from before the totals were kept, then its unpriced calls and denials are read from its steps', async () => {
    const runId = await mixedRun();
    await stores.db.query('UPDATE runs SET step_count = NULL, denied_steps = 0, last_denial = NULL WHERE id = $1', [
      runId,
    ]);
    await stores.db.query('DELETE FROM run_totals WHERE run_id = $1', [runId]);
    expect(await listed(runId)).toEqual(EXPECTED);
  });

  it('when a database from before the migration is migrated, then the runs it holds are counted', async () => {
    const runId = await mixedRun();
    await stores.db.query('ALTER TABLE run_totals DROP COLUMN unpriced_calls');
    await stores.db.query('ALTER TABLE runs DROP COLUMN denied_steps, DROP COLUMN last_denial');
    await stores.db.query('DELETE FROM schema_migrations WHERE version = 25');
    expect(await migrate(stores.db)).toEqual([25]);
    expect(await listed(runId)).toEqual(EXPECTED);
  });
});
