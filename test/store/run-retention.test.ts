/**
 * The purge of runs past their workspace's retention, against real stores: two purgers at once
 * (two daemons) delete each run once with its steps and totals, RUNNING runs and runs inside the
 * retention stay, run_counts follows, and the stale-run sweeper's timer runs the purge.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { createStaleRunSweeper } from '../../src/jobs/stale-run-sweeper.js';
import type { Queryable } from '../../src/store/db.js';
import { purgeExpiredRuns } from '../../src/store/deletion.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type TestStores } from '../support/harness.js';

const DAY = 86_400_000;

/** Runs of the workspace started and ended at `at`, each with two steps and a totals row. */
async function seedRuns(
  db: Queryable,
  workspaceId: string,
  at: Date,
  count: number,
  status = 'COMPLETED',
): Promise<string[]> {
  const ids = Array.from({ length: count }, () => randomUUID());
  await db.query(
    `INSERT INTO runs (id, workspace_id, user_id, status, decision, started_at, ended_at, step_count)
     SELECT id, $2, 'u', $4, '{}'::json, $3, CASE WHEN $4 = 'RUNNING' THEN NULL ELSE $3::timestamptz END, 2 FROM unnest($1::uuid[]) AS id`,
    [ids, workspaceId, at, status],
  );
  await db.query(
    `INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, decision, created_at, finished_at)
     SELECT gen_random_uuid(), id, $2, seq, 'MODEL_CALL', 'COMPLETED', '{}'::json, $3, $3
     FROM unnest($1::uuid[]) AS id, generate_series(1, 2) AS seq`,
    [ids, workspaceId, at],
  );
  await db.query(
    'INSERT INTO run_totals (run_id, total_tokens, total_cost_usd) SELECT id, 10, 0.5 FROM unnest($1::uuid[]) AS id',
    [ids],
  );
  return ids;
}

async function runsOf(
  db: Queryable,
  workspaceId: string,
): Promise<{ runs: string[]; steps: number; totals: number; counted: number }> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM runs WHERE workspace_id = $1 ORDER BY id', [
    workspaceId,
  ]);
  const one = async (sql: string) => Number((await db.query<{ n: string }>(sql, [workspaceId])).rows[0]!.n);
  return {
    runs: rows.map((r) => r.id),
    steps: await one('SELECT count(*) AS n FROM steps WHERE workspace_id = $1'),
    totals: await one(
      'SELECT count(*) AS n FROM run_totals t JOIN runs r ON r.id = t.run_id WHERE r.workspace_id = $1',
    ),
    counted: await one('SELECT coalesce(sum(runs), 0) AS n FROM run_counts WHERE workspace_id = $1'),
  };
}

describe.each(BACKENDS)('run retention purge on %s', (backend) => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores(backend);
  });
  afterAll(async () => {
    await stores?.close();
  });

  it('when two purgers run at once, then every expired run goes once with its steps; the others stay', async () => {
    const now = new Date('2031-05-20T10:00:00Z');
    const ws = await createWorkspace(stores.db, 'retained', 'scale');
    const keepAll = await createWorkspace(stores.db, 'kept', 'scale');
    await stores.db.query('UPDATE workspaces SET retention_days = 40 WHERE id = $1', [ws.id]);
    await seedRuns(stores.db, ws.id, new Date(now.getTime() - 41 * DAY), 230);
    const running = await seedRuns(stores.db, ws.id, new Date(now.getTime() - 60 * DAY), 1, 'RUNNING');
    const inside = await seedRuns(stores.db, ws.id, new Date(now.getTime() - 39 * DAY), 2);
    const kept = await seedRuns(stores.db, keepAll.id, new Date(now.getTime() - 400 * DAY), 3);

    const purged = await Promise.all([
      purgeExpiredRuns(stores.db, now, { batchSize: 20 }),
      purgeExpiredRuns(stores.db, now, { batchSize: 20 }),
    ]);
    const rest = await purgeExpiredRuns(stores.db, now, { batchSize: 20 });
    expect(purged[0] + purged[1] + rest).toBe(230);
    expect(await runsOf(stores.db, ws.id)).toEqual({
      runs: [...running, ...inside].sort(),
      steps: 6,
      totals: 3,
      counted: 3,
    });
    expect(await runsOf(stores.db, keepAll.id)).toEqual({ runs: kept.sort(), steps: 6, totals: 3, counted: 3 });
  });

  it('when an old run has a step whose result landed today, then it stays: that cost counts today', async () => {
    const now = new Date('2031-04-01T10:00:00Z'); // before the runs the test above left inside its retention
    const ws = await createWorkspace(stores.db, 'late result', 'scale');
    await stores.db.query('UPDATE workspaces SET retention_days = 35 WHERE id = $1', [ws.id]);
    const [late] = await seedRuns(stores.db, ws.id, new Date(now.getTime() - 90 * DAY), 1);
    const [plain] = await seedRuns(stores.db, ws.id, new Date(now.getTime() - 90 * DAY), 1);
    await stores.db.query('UPDATE steps SET finished_at = $2 WHERE run_id = $1 AND sequence = 2', [
      late,
      new Date(now.getTime() - 1000),
    ]);
    expect(await purgeExpiredRuns(stores.db, now)).toBe(1);
    expect((await runsOf(stores.db, ws.id)).runs).toEqual([late]);
    expect(plain).not.toBe(late);
  });

  it('when the sweeper runs on its timer, then it purges expired runs and stops cleanly', async () => {
    const now = new Date('2031-09-20T10:00:00Z');
    const ws = await createWorkspace(stores.db, 'timed', 'scale');
    await stores.db.query('UPDATE workspaces SET retention_days = 35 WHERE id = $1', [ws.id]);
    await seedRuns(stores.db, ws.id, new Date(now.getTime() - 36 * DAY), 7);
    const sweeper = createStaleRunSweeper({
      db: stores.db,
      clock: { now: () => now },
      logger: createLogger('silent'),
      idleMs: DAY,
      intervalMs: 0,
      idempotencyPurgeIntervalMs: 20,
      runPurgeBatchSize: 3,
    });
    sweeper.start();
    try {
      const deadline = Date.now() + 5_000;
      while ((await runsOf(stores.db, ws.id)).runs.length > 0 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 10));
    } finally {
      await sweeper.stop();
    }
    expect(await runsOf(stores.db, ws.id)).toEqual({ runs: [], steps: 0, totals: 0, counted: 0 });
  });
});
