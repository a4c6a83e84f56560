/**
 * The stale-run sweep against real stores: two sweepers on one database end each stale run
 * exactly once and free each concurrency slot once; fresh and finished runs are left alone.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { type Clock } from '../../src/clock.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { createStaleRunSweeper } from '../../src/jobs/stale-run-sweeper.js';
import { runCounts, scopeAt } from '../../src/store/counters/counters.js';
import type { Db, Queryable } from '../../src/store/db.js';
import { insertSteps } from '../../src/store/runs.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { openTestStores, type Backend, type TestStores } from '../support/harness.js';

const HOUR = 3_600_000;
const log = createLogger('silent');

describe.each<Backend>(['postgres+redis', 'postgres+sql', 'embedded'])('stale-run sweep on %s', (backend) => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores(backend);
  });
  afterAll(async () => {
    await stores?.close();
  });

  it('when two sweepers race over stale runs, then each run is ended FAILED once and its slot freed once', async () => {
    const start = new Date();
    const clock: Clock = { now: () => start };
    const guard = new GuardService(stores.db, stores.counters, clock, log);
    const ws = await createWorkspace(stores.db, 'sweep', 'enterprise');
    const total = 24;
    const ids: string[] = [];
    for (let i = 0; i < total; i++) ids.push((await guard.startRun(ws.id, { user_id: `u${i}` })).id);
    // Stale too: its last step is as old as the runs.
    await guard.createStep(ws.id, ids[0]!, { type: 'TOOL_CALL', sequence: 1, tool_name: 'search' });
    // Not stale: a recent step, and a run that ended normally.
    const fresh = (await guard.startRun(ws.id, { user_id: 'fresh' })).id;
    const done = (await guard.startRun(ws.id, { user_id: 'done' })).id;
    await guard.endRun(ws.id, done, 'COMPLETED');
    const later = new Date(start.getTime() + 2 * HOUR);
    const recently = new GuardService(
      stores.db,
      stores.counters,
      { now: () => new Date(later.getTime() - 60_000) },
      log,
    );
    await recently.createStep(ws.id, fresh, { type: 'TOOL_CALL', sequence: 1, tool_name: 'search' });
    const running = async () => (await runCounts(stores.db, scopeAt(later, ws.id, 'x'))).concurrentRuns;
    expect(await running()).toBe(total + 1);

    const sweepClock: Clock = { now: () => later };
    const sweepers = [0, 1].map(() =>
      createStaleRunSweeper({
        db: stores.db,
        clock: sweepClock,
        logger: log,
        idleMs: HOUR,
        intervalMs: 0,
        batchSize: 5,
      }),
    );
    const results = await Promise.all([...sweepers.map((s) => s.sweep()), ...sweepers.map((s) => s.sweep())]);
    const endedIds = results.flat().map((r) => r.id);
    expect(endedIds).toHaveLength(total);
    expect(new Set(endedIds)).toEqual(new Set(ids));

    const { rows } = await stores.db.query<{ id: string; status: string; ended_at: Date }>(
      'SELECT id, status, ended_at FROM runs WHERE workspace_id = $1',
      [ws.id],
    );
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const id of ids) {
      expect(byId.get(id)!.status).toBe('FAILED');
      expect(new Date(byId.get(id)!.ended_at).getTime()).toBe(later.getTime());
    }
    expect(byId.get(fresh)!.status).toBe('RUNNING');
    expect(byId.get(done)!.status).toBe('COMPLETED');
    expect(await running()).toBe(1);

    // Nothing left: a further sweep ends nothing; the client's own late end is a 409.
    expect(await sweepers[0]!.sweep()).toEqual([]);
    await expect(guard.endRun(ws.id, ids[0]!, 'COMPLETED')).rejects.toMatchObject({ code: 'RUN_NOT_RUNNING' });
    expect(await running()).toBe(1);
  });

  it('when started and stopped, then it sweeps on its timer and stop waits for the sweep', async () => {
    const ws = await createWorkspace(stores.db, 'timer', 'enterprise');
    const start = new Date();
    const guard = new GuardService(stores.db, stores.counters, { now: () => start }, log);
    const id = (await guard.startRun(ws.id, { user_id: 't' })).id;
    let swept = 0;
    const sweeper = createStaleRunSweeper({
      db: stores.db,
      clock: { now: () => new Date(start.getTime() + HOUR + 1) },
      logger: log,
      idleMs: HOUR,
      intervalMs: 20,
      onEnded: (n) => (swept += n),
    });
    sweeper.start();
    const deadline = Date.now() + 5_000;
    while (swept === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    await sweeper.stop();
    expect(swept).toBeGreaterThanOrEqual(1);
    const { rows } = await stores.db.query<{ status: string }>('SELECT status FROM runs WHERE id = $1', [id]);
    expect(rows[0]!.status).toBe('FAILED');
  });
});

describe('stale-run sweep on postgres, beside a step being written', () => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores('postgres+sql');
  });
  afterAll(async () => {
    await stores?.close();
  });

  it('when a step commits while the sweep looks its run over, then the run is not ended: it was not idle', async () => {
    const start = new Date(Date.now() - 3 * HOUR);
    const now = new Date();
    const old = new GuardService(stores.db, stores.counters, { now: () => start }, log);
    const ws = await createWorkspace(stores.db, 'sweep-race', 'enterprise');
    const idle = (await old.startRun(ws.id, { user_id: 'idle' })).id;
    const target = (await old.startRun(ws.id, { user_id: 'target' })).id;

    // The race, made to happen rather than hoped for: the sweep's first statement (its snapshot
    // taken) waits at a gate on the target's row, before it locks it, while the step commits.
    // (It used to be made likely with 300,000 steps that slowed the statement down: beside other
    // work that took past the statement timeout, and never proved the step committed in time.)
    const GATE = 7_318_842_999;
    await stores.db
      .query(`CREATE OR REPLACE FUNCTION sweep_gate(run uuid) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
      BEGIN IF run = '${target}' THEN PERFORM pg_advisory_xact_lock_shared(${GATE}); END IF; RETURN true; END $$`);
    const gated: Db = {
      ...stores.db,
      transaction: (fn) =>
        stores.db.transaction((tx) =>
          fn({
            query: (sql: string, params?: readonly unknown[]) =>
              tx.query(
                sql.includes('SKIP LOCKED')
                  ? sql.replace("WHERE r.status = 'RUNNING'", "WHERE sweep_gate(r.id) AND r.status = 'RUNNING'")
                  : sql,
                params,
              ),
          } as Queryable),
        ),
    };

    // The step is written as the daemon writes it, on a connection of its own: its run stays
    // locked until the commit.
    const client = new pg.Client({ connectionString: stores.databaseUrl! });
    await client.connect();
    try {
      await client.query('SELECT pg_advisory_lock($1)', [GATE]);
      await client.query('BEGIN');
      const tx = { query: (sql: string, params?: unknown[]) => client.query(sql, params) } as unknown as Queryable;
      expect(
        await insertSteps(tx, [
          {
            id: randomUUID(),
            runId: target,
            workspaceId: ws.id,
            sequence: 1,
            type: 'TOOL_CALL',
            status: 'ALLOWED',
            model: null,
            toolName: 'search',
            inputData: null,
            decision: { outcome: 'ALLOW', reason: null, evaluated_rules: {} },
            now,
          },
        ]),
      ).toEqual(['inserted']);

      const sweeper = createStaleRunSweeper({
        db: gated,
        clock: { now: () => now },
        logger: log,
        idleMs: HOUR,
        intervalMs: 0,
      });
      const swept = sweeper.sweep();
      // The sweep waits at the gate: its snapshot predates the commit below.
      for (;;) {
        const { rows } = await client.query(
          `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted`,
          [GATE % 2 ** 32],
        );
        if (rows.length > 0) break;
      }
      await client.query('COMMIT');
      await client.query('SELECT pg_advisory_unlock($1)', [GATE]);
      const ended = (await swept).map((r) => r.id);
      expect(ended).toContain(idle);
      expect(ended).not.toContain(target);
    } finally {
      await client.end();
    }
    const { rows } = await stores.db.query<{ status: string }>('SELECT status FROM runs WHERE id = $1', [target]);
    expect(rows[0]!.status).toBe('RUNNING');
  });
});
