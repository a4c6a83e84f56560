/** Reconciliation finds every kind of drift between counters and records, and repairs it. */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { GuardService } from '../../src/service/guard-service.js';
import { reconcile } from '../../src/service/reconcile.js';
import { scopeAt } from '../../src/store/counters.js';
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

  it('when counters and the Redis copy are tampered with, then each drift is reported and repaired', async () => {
    const ws = await createWorkspace(stores.db, 'r', 'scale');
    await stores.db.query(
      `INSERT INTO model_pricing (id, workspace_id, model, input_cost_per_token, output_cost_per_token) VALUES (gen_random_uuid(), $1, 'm', 0.001, 0.002)`,
      [ws.id],
    );
    const run = (await guard.startRun(ws.id, { user_id: 'u' })).body;
    for (const sequence of [1, 2, 3]) {
      const s = (await guard.createStep(ws.id, run.id, { type: 'MODEL_CALL', sequence, model: 'm' })).body;
      await guard.finishStep(ws.id, run.id, s.id, { status: 'COMPLETED', durationMs: 1, promptTokens: 10, completionTokens: 5 });
    }
    const clean = await reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: false });
    expect(clean.drifts.filter((d) => d.key.startsWith(ws.id) || d.key === run.id)).toEqual([]);

    await stores.db.query('UPDATE usage_daily SET spend_micros = spend_micros + 7, runs = 9 WHERE workspace_id = $1', [ws.id]);
    await stores.db.query('UPDATE user_usage_daily SET spend_micros = 1 WHERE workspace_id = $1', [ws.id]);
    const scope = scopeAt(clock.now(), ws.id, 'u');
    const redis = new Redis(REDIS_URL, { keyPrefix: stores.redisKeyPrefix! });
    await redis.set(`{${ws.id}}:spend:${scope.day}`, '999999999');

    const found = await reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: true });
    const mine = found.drifts.filter((d) => d.key.startsWith(ws.id) || d.key === run.id);
    expect(mine.map((d) => d.kind).sort()).toEqual(['spend_copy', 'user_usage', 'workspace_usage']);
    expect(mine.find((d) => d.kind === 'workspace_usage')).toMatchObject({ expected: 'spend=60000 runs=1', found: 'spend=60007 runs=9' });

    const after = await reconcile(stores.db, stores.counters, { now: clock.now(), days: 2, repair: false });
    expect(after.drifts.filter((d) => d.key.startsWith(ws.id) || d.key === run.id)).toEqual([]);
    expect(await stores.counters.readSpend(scope)).toEqual({ workspaceDailySpendMicros: 60_000, userDailySpendMicros: 60_000 });
    redis.disconnect();
  });
});
