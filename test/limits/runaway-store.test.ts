/**
 * What a step check of a run with limits reads under the run's lock (src/store/runs.ts
 * lockRunUsage), on every backend: the usage a run starts with, what an allowed step adds, the
 * recorded cost, and (reserve mode) the estimates of its steps still in flight.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Decision } from '../../src/rules/engine.js';
import { insertRuns, insertSteps, type NewStep } from '../../src/store/runs.js';
import { countAllowedStep, lockRunUsage } from '../../src/store/run-usage.js';
import { timeOrderedId } from '../../src/store/time-ordered-id.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type TestStores } from '../support/harness.js';

const ALLOW: Decision = { outcome: 'ALLOW', reason: null, evaluated_rules: {} };
const DENY: Decision = { outcome: 'DENY', reason: 'RUN_STEP_LIMIT_EXCEEDED', evaluated_rules: {} };

describe.each(BACKENDS)('run usage on %s', (backend) => {
  let stores: TestStores;
  let workspaceId: string;

  beforeAll(async () => {
    stores = await openTestStores(backend);
    workspaceId = (await createWorkspace(stores.db, 'usage', 'enterprise')).id;
  });
  afterAll(async () => {
    await stores?.close();
  });

  const now = new Date();
  const step = (runId: string, sequence: number, estimateMicros: number | null, denied = false): NewStep => ({
    id: timeOrderedId(now.getTime()),
    runId,
    workspaceId,
    sequence,
    type: 'MODEL_CALL',
    status: denied ? 'BLOCKED' : 'ALLOWED',
    model: 'm',
    toolName: null,
    inputData: null,
    decision: denied ? DENY : ALLOW,
    now,
    estimateMicros,
  });

  it('when a run with limits is started and steps are written, then its usage under the lock says so', async () => {
    const runId = timeOrderedId(now.getTime());
    await insertRuns(stores.db, [
      {
        id: runId,
        workspaceId,
        userId: 'u',
        status: 'RUNNING',
        metadata: null,
        decision: ALLOW,
        now,
        day: now.toISOString().slice(0, 10),
        guard: {
          limits: { maxSteps: 5, maxCostMicros: 1_000_000, maxIdenticalCalls: 2 },
          allowedSteps: 0,
          lastCallHash: null,
          identicalCalls: 0,
        },
      },
    ]);
    expect(await lockRunUsage(stores.db, workspaceId, runId, { reservations: true })).toEqual({
      status: 'RUNNING',
      allowedSteps: 0,
      lastCallHash: null,
      identicalCalls: 0,
      costMicros: 0,
      reservedMicros: 0,
    });
    await insertSteps(stores.db, [
      step(runId, 1, 40_000),
      step(runId, 2, 2_500),
      step(runId, 3, 99_000, true),
      step(runId, 4, null),
    ]);
    await countAllowedStep(stores.db, runId, { hash: 'h1', identicalCalls: 1 });
    await countAllowedStep(stores.db, runId, { hash: 'h1', identicalCalls: 2 });
    const usage = await stores.db.transaction((tx) => lockRunUsage(tx, workspaceId, runId, { reservations: true }));
    // The denied step's estimate is no reservation; a step without an estimate reserves nothing.
    expect(usage).toMatchObject({ allowedSteps: 2, lastCallHash: 'h1', identicalCalls: 2, reservedMicros: 42_500 });
    expect((await lockRunUsage(stores.db, workspaceId, runId))!.reservedMicros).toBe(0);
  });

  it('when the run belongs to another workspace, then there is no usage to read', async () => {
    const other = (await createWorkspace(stores.db, 'other', 'enterprise')).id;
    expect(await lockRunUsage(stores.db, other, timeOrderedId(now.getTime()))).toBeNull();
  });
});
