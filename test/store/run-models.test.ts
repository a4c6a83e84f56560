/**
 * The models a run's steps named, kept on the run (migration 18) for the run list: distinct, in
 * first-use order, at most RUN_MODELS_KEPT; written by the step insert (any batch) and by a
 * proxied call's run started with its first step; read from the steps for a run that keeps none
 * (NULL: from before the migration).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import type { Decision } from '../../src/rules/engine.js';
import type { Clock } from '../../src/clock.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { RUN_MODELS_KEPT, insertSteps, type NewStep } from '../../src/store/runs.js';
import { listRuns } from '../../src/store/run-list.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type TestStores } from '../support/harness.js';
import { runWithStep } from '../support/run-with-step.js';

const NOW = new Date('2026-05-04T12:00:00Z');
const clock: Clock = { now: () => NOW };
const ALLOW: Decision = { outcome: 'ALLOW', reason: null, evaluated_rules: {} };

describe.each(BACKENDS)('run models on %s', (backend) => {
  let stores: TestStores;
  let guard: GuardService;
  let workspaceId: string;
  beforeAll(async () => {
    stores = await openTestStores(backend);
    guard = new GuardService(stores.db, stores.counters, clock, createLogger('silent'));
    workspaceId = (await createWorkspace(stores.db, 'models', 'enterprise')).id;
  });
  afterAll(async () => {
    await stores?.close();
  });

  const startRun = async () => (await guard.startRun(workspaceId, { user_id: 'u' })).id;
  const newStep = (runId: string, sequence: number, model: string | null): NewStep => ({
    id: randomUUID(),
    runId,
    workspaceId,
    sequence,
    type: model === null ? 'TOOL_CALL' : 'MODEL_CALL',
    status: 'ALLOWED',
    model,
    toolName: model === null ? 'search' : null,
    inputData: null,
    decision: ALLOW,
    now: NOW,
  });
  const keptModels = async (runId: string) =>
    (await stores.db.query<{ models: string[] | null }>('SELECT models FROM runs WHERE id = $1', [runId])).rows[0]!
      .models;
  const listedModels = async (runId: string) => {
    const page = await listRuns(stores.db, workspaceId, { status: null, userId: null, page: 1, perPage: 100 });
    return page.items.find((r) => r.id === runId)!.models;
  };

  it('when a run has no steps, then it lists no models', async () => {
    const runId = await startRun();
    expect(await keptModels(runId)).toEqual([]);
    expect(await listedModels(runId)).toEqual([]);
  });

  it('when one batch names models out of order and repeats them, then the run keeps each once, in sequence order', async () => {
    const runId = await startRun();
    const other = await startRun();
    // Listed out of sequence order on purpose: first use is by sequence, not by position in the batch.
    const outcomes = await insertSteps(stores.db, [
      newStep(runId, 3, 'gpt-4o'),
      newStep(runId, 1, 'gpt-4o-mini'),
      newStep(other, 1, 'claude-haiku'),
      newStep(runId, 2, null),
      newStep(runId, 4, 'gpt-4o-mini'),
    ]);
    expect(outcomes).toEqual(['inserted', 'inserted', 'inserted', 'inserted', 'inserted']);
    expect(await keptModels(runId)).toEqual(['gpt-4o-mini', 'gpt-4o']);
    expect(await keptModels(other)).toEqual(['claude-haiku']);
    expect(await listedModels(runId)).toEqual(['gpt-4o-mini', 'gpt-4o']);
  });

  it('when later steps name a known model and a new one, then only the new one is appended', async () => {
    const runId = await startRun();
    await insertSteps(stores.db, [newStep(runId, 1, 'b-model')]);
    await insertSteps(stores.db, [newStep(runId, 2, 'b-model')]);
    await insertSteps(stores.db, [newStep(runId, 3, 'a-model'), newStep(runId, 4, 'b-model')]);
    expect(await keptModels(runId)).toEqual(['b-model', 'a-model']);
  });

  it('when a step loses its sequence, then its model is not counted', async () => {
    const runId = await startRun();
    await insertSteps(stores.db, [newStep(runId, 1, 'first')]);
    const outcomes = await insertSteps(stores.db, [newStep(runId, 1, 'never-written')]);
    expect(outcomes).toEqual(['duplicate_sequence']);
    expect(await keptModels(runId)).toEqual(['first']);
  });

  it(`when a run names more than ${RUN_MODELS_KEPT} models, then the first ${RUN_MODELS_KEPT} are kept`, async () => {
    const runId = await startRun();
    const names = Array.from({ length: RUN_MODELS_KEPT + 4 }, (_, i) => `model-${String(i).padStart(2, '0')}`);
    await insertSteps(
      stores.db,
      names.slice(0, 10).map((name, i) => newStep(runId, i + 1, name)),
    );
    await insertSteps(
      stores.db,
      names.slice(10).map((name, i) => newStep(runId, i + 11, name)),
    );
    expect(await keptModels(runId)).toEqual(names.slice(0, RUN_MODELS_KEPT));
  });

  it("when a proxied call's run starts with its step, then the run keeps that step's model", async () => {
    const { run } = await runWithStep(
      guard,
      workspaceId,
      { user_id: 'proxy-user' },
      { type: 'MODEL_CALL', model: 'proxied-model' },
    );
    expect(await keptModels(run.id)).toEqual(['proxied-model']);
    expect(await listedModels(run.id)).toEqual(['proxied-model']);
  });

  it('when a run keeps no models (from before migration 18), then the list reads them from its steps and writes leave it NULL', async () => {
    const runId = await startRun();
    await insertSteps(stores.db, [newStep(runId, 1, 'old-b'), newStep(runId, 2, 'old-a')]);
    await stores.db.query('UPDATE runs SET models = NULL WHERE id = $1', [runId]);
    await insertSteps(stores.db, [newStep(runId, 3, 'old-c'), newStep(runId, 4, 'old-b')]);
    expect(await keptModels(runId)).toBeNull();
    expect(await listedModels(runId)).toEqual(['old-b', 'old-a', 'old-c']);
  });
});
