/**
 * Run admission against real stores: a workspace without run limits admits starts without its
 * admission lock, and every such start still counts once a limit is set.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { systemClock } from '../../src/clock.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { createWorkspace, updateWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type Backend, type TestStores } from '../support/harness.js';

const log = createLogger('silent');

describe.each<Backend>(BACKENDS)('run admission on %s', (backend) => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores(backend);
  });
  afterAll(async () => {
    await stores?.close();
  });

  it('when 40 starts race in a workspace without run limits, then all are admitted and counted; a limit set later counts them', async () => {
    const ws = await createWorkspace(stores.db, 'unlimited', 'enterprise');
    expect([ws.monthly_run_limit, ws.max_concurrent_runs]).toEqual([null, null]);
    const guard = new GuardService(stores.db, stores.counters, systemClock, log);
    const started = await Promise.all(
      Array.from({ length: 40 }, (_, i) => guard.startRun(ws.id, { user_id: `u${i % 4}` })),
    );
    expect(started.every((s) => s.status === 'RUNNING')).toBe(true);
    const { rows: usage } = await stores.db.query<{ runs: number }>(
      'SELECT runs FROM usage_daily WHERE workspace_id = $1',
      [ws.id],
    );
    expect(usage.map((r) => Number(r.runs))).toEqual([40]);
    const { rows: users } = await stores.db.query<{ n: string }>(
      'SELECT sum(run_count)::text AS n FROM sdk_users WHERE workspace_id = $1',
      [ws.id],
    );
    expect(users[0]!.n).toBe('40');

    await updateWorkspace(stores.db, ws.id, { max_concurrent_runs: 45 }, new Date());
    await stores.counters.stateChanged(ws.id);
    const more = await Promise.all(Array.from({ length: 10 }, () => guard.startRun(ws.id, { user_id: 'late' })));
    expect(more.filter((s) => s.status === 'RUNNING')).toHaveLength(5);
    expect(more.filter((s) => s.decision.reason === 'MAX_CONCURRENT_RUNS_EXCEEDED')).toHaveLength(5);
  });
});
