/**
 * The run list's total is read from counts Postgres keeps by workspace and status (migration 8),
 * not counted from the runs: against real Postgres and the embedded database, runs started,
 * blocked, stepped, ended and swept at once by two daemons leave each status's total equal to
 * the runs' count; a batch of steps rewrites no count; runs deleted or truncated leave the
 * counts; a database from before the counts gets them at its upgrade, which waits for an older
 * daemon's write however long, not the pool's statement timeout.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { systemClock } from '../../src/clock.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { createStaleRunSweeper } from '../../src/jobs/stale-run-sweeper.js';
import { type RunStatus } from '../../src/store/runs.js';
import { listRuns } from '../../src/store/run-list.js';
import { postgresDb } from '../../src/store/db.js';
import { migrate } from '../../src/store/migrations.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { BACKENDS, openTestStores, type TestStores } from '../support/harness.js';

const log = createLogger('silent');
const RUN_VALUES = `'{}', '{"outcome":"ALLOW","reason":null,"evaluated_rules":{}}', now()`;
const STATUSES: (RunStatus | null)[] = [null, 'RUNNING', 'COMPLETED', 'FAILED', 'BLOCKED'];

describe.each(BACKENDS)('run counts on %s', (backend) => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores(backend);
  });
  afterAll(async () => {
    await stores?.close();
  });

  const workspace = async () => (await createWorkspace(stores.db, 'counts', 'enterprise')).id;
  const total = async (ws: string, status: RunStatus | null) =>
    (await listRuns(stores.db, ws, { status, userId: null, page: 1, perPage: 1 })).total;
  /** Each status's total (null: all) as the list answers it, and as the runs count it. */
  const totals = async (ws: string) => {
    const listed: Record<string, number> = {};
    const counted: Record<string, number> = {};
    for (const status of STATUSES) {
      listed[status ?? 'all'] = await total(ws, status);
      const { rows } = await stores.db.query<{ n: string | number }>(
        `SELECT count(*) AS n FROM runs WHERE workspace_id = $1 AND ($2::text IS NULL OR status = $2)`,
        [ws, status],
      );
      counted[status ?? 'all'] = Number(rows[0]!.n);
    }
    return { listed, counted };
  };

  it("when two daemons start, block, step, end and sweep runs at once, then each status's total is the runs' count", async () => {
    const ws = await workspace();
    const [a, b] = [0, 1].map(() => new GuardService(stores.db, stores.counters, systemClock, log)) as [
      GuardService,
      GuardService,
    ];
    await stores.db.query(`INSERT INTO sdk_users (workspace_id, user_id, blocked) VALUES ($1, 'blocked', true)`, [ws]);
    const started = await Promise.all(
      Array.from({ length: 48 }, (_, i) =>
        (i % 2 ? a : b).startRun(ws, { user_id: i % 8 === 0 ? 'blocked' : `u${i % 5}` }),
      ),
    );
    const running = started.filter((r) => r.status === 'RUNNING').map((r) => r.id);
    expect(running).toHaveLength(42);
    await Promise.all(
      running.map(async (runId, i) => {
        const guard = i % 2 ? b : a;
        await guard.createStep(ws, runId, { type: 'TOOL_CALL', tool_name: 't' });
        if (i % 3 === 2) return; // left running, for the sweep
        // Ended twice, by both daemons: only the first end moves the count.
        await Promise.all([
          guard.endRun(ws, runId, i % 3 ? 'FAILED' : 'COMPLETED').catch(() => null),
          (i % 2 ? a : b).endRun(ws, runId, 'COMPLETED').catch(() => null),
        ]);
      }),
    );
    const afterEnds = await totals(ws);
    expect(afterEnds.listed).toEqual(afterEnds.counted);
    expect(afterEnds.listed).toMatchObject({ all: 48, BLOCKED: 6, RUNNING: 14 });

    // The sweep ends the idle rest as FAILED (an hour on, by its clock).
    const later = { now: () => new Date(Date.now() + 3_600_000) };
    const sweeper = createStaleRunSweeper({ db: stores.db, clock: later, logger: log, idleMs: 60_000, intervalMs: 0 });
    expect(await sweeper.sweep()).toHaveLength(14);
    const afterSweep = await totals(ws);
    expect(afterSweep.listed).toEqual(afterSweep.counted);
    expect(afterSweep.listed).toMatchObject({ all: 48, BLOCKED: 6, RUNNING: 0 });
    // The list reads the kept counts, not the runs: a count written behind the daemons' back shows.
    await stores.db.query(`INSERT INTO run_counts (workspace_id, status, shard, runs) VALUES ($1, 'FAILED', 999, 5)`, [
      ws,
    ]);
    expect(await total(ws, 'FAILED')).toBe(afterSweep.counted.FAILED! + 5);
    // A user's runs are counted from the runs.
    expect((await listRuns(stores.db, ws, { status: 'FAILED', userId: 'u1', page: 1, perPage: 1 })).total).toBe(
      Number(
        (
          await stores.db.query<{ n: string }>(
            `SELECT count(*) AS n FROM runs WHERE workspace_id = $1 AND status = 'FAILED' AND user_id = 'u1'`,
            [ws],
          )
        ).rows[0]!.n,
      ),
    );
    // Another workspace's total is its own.
    expect(await total(await workspace(), null)).toBe(0);
  });

  it("when a batch of steps raises its run's step count, then no count is written", async () => {
    const ws = await workspace();
    const guard = new GuardService(stores.db, stores.counters, systemClock, log);
    const runId = (await guard.startRun(ws, { user_id: 'u' })).id;
    const versions = async () =>
      (
        await stores.db.query<{ v: string }>(
          "SELECT string_agg(xmin::text || status || runs, ',' ORDER BY status, shard) AS v FROM run_counts WHERE workspace_id = $1",
          [ws],
        )
      ).rows[0]!.v;
    const before = await versions();
    expect(before).toContain('RUNNING1');
    await Promise.all(
      Array.from({ length: 5 }, () => guard.createStep(ws, runId, { type: 'TOOL_CALL', tool_name: 't' })),
    );
    const { rows } = await stores.db.query<{ step_count: number }>('SELECT step_count FROM runs WHERE id = $1', [
      runId,
    ]);
    expect(rows[0]!.step_count).toBe(5);
    expect(await versions()).toBe(before);
  });

  it('when runs are deleted or the table truncated, then the totals follow', async () => {
    const ws = await workspace();
    const guard = new GuardService(stores.db, stores.counters, systemClock, log);
    const ids = await Promise.all(
      Array.from({ length: 3 }, async () => (await guard.startRun(ws, { user_id: 'u' })).id),
    );
    await stores.db.query('DELETE FROM runs WHERE id = $1', [ids[0]]);
    expect(await total(ws, 'RUNNING')).toBe(2);
    await stores.db.query('TRUNCATE runs CASCADE');
    expect(await total(ws, null)).toBe(0);
    await guard.startRun(ws, { user_id: 'u' });
    expect(await total(ws, null)).toBe(1);
  });

  it("when a database from before the counts (version 7) holds runs and is migrated, then the totals are its runs' counts", async () => {
    const ws = await workspace();
    const guard = new GuardService(stores.db, stores.counters, systemClock, log);
    const ids = await Promise.all(
      Array.from({ length: 4 }, async () => (await guard.startRun(ws, { user_id: 'u' })).id),
    );
    await guard.endRun(ws, ids[0]!, 'COMPLETED');
    // As version 7 has it: no counts, no triggers.
    await stores.db.exec(`DROP TABLE run_counts; DROP FUNCTION run_counts_raise() CASCADE;
      DELETE FROM schema_migrations WHERE version = 8`);
    await guard.endRun(ws, ids[1]!, 'FAILED'); // written by a daemon of version 7
    expect(await migrate(stores.db)).toEqual([8]);
    const { listed, counted } = await totals(ws);
    expect(listed).toEqual(counted);
    expect(listed).toMatchObject({ all: 4, RUNNING: 2, COMPLETED: 1, FAILED: 1 });
    // And counted from there on.
    await guard.endRun(ws, ids[2]!, 'COMPLETED');
    expect(await total(ws, 'COMPLETED')).toBe(2);
  });

  it.skipIf(backend === 'embedded')(
    "when the server's default isolation is repeatable read, then an upgrade counts the runs written while it waited, and a truncate leaves no count",
    async () => {
      const ws = await workspace();
      const name = new URL(stores.databaseUrl!).pathname.slice(1);
      await stores.db.exec(`DROP TABLE run_counts; DROP FUNCTION run_counts_raise() CASCADE;
      DELETE FROM schema_migrations WHERE version = 8;
      ALTER DATABASE "${name}" SET default_transaction_isolation = 'repeatable read'`);
      // Connections opened from here on take the default.
      const writer = new pg.Client({ connectionString: stores.databaseUrl! });
      const upgrading = postgresDb({ connectionString: stores.databaseUrl!, max: 2 });
      await writer.connect();
      try {
        // An older daemon's start, committed while the migration waits for its lock.
        const insertRun = async (status: string) => {
          await writer.query('BEGIN');
          await writer.query(
            `INSERT INTO runs (id, workspace_id, user_id, status, metadata, decision, started_at)
          VALUES (gen_random_uuid(), $1, 'old', $2, ${RUN_VALUES})`,
            [ws, status],
          );
        };
        await insertRun('RUNNING');
        const migrating = migrate(upgrading);
        await new Promise((resolve) => setTimeout(resolve, 300));
        await writer.query('COMMIT');
        expect(await migrating).toEqual([8]);
        expect(await total(ws, 'RUNNING')).toBe(1);

        // A truncate that waited for a writer clears the count that writer committed.
        await insertRun('BLOCKED');
        const truncating = upgrading.transaction((tx) => tx.query('TRUNCATE runs CASCADE'));
        await new Promise((resolve) => setTimeout(resolve, 300));
        await writer.query('COMMIT');
        await truncating;
        expect(await total(ws, null)).toBe(0);
      } finally {
        await writer.end();
        await upgrading.close();
        await stores.db.query(`ALTER DATABASE "${name}" RESET default_transaction_isolation`);
      }
    },
  );

  it.skipIf(backend === 'embedded')(
    "when an older daemon's write holds the runs longer than the pool's statement timeout, then the upgrade waits for it instead of failing",
    async () => {
      const ws = await workspace();
      await stores.db.exec(`DROP TABLE run_counts; DROP FUNCTION run_counts_raise() CASCADE;
      DELETE FROM schema_migrations WHERE version = 8`);
      const writer = new pg.Client({ connectionString: stores.databaseUrl! });
      const upgrading = postgresDb({ connectionString: stores.databaseUrl!, max: 2, statementTimeoutMs: 100 });
      await writer.connect();
      try {
        await writer.query('BEGIN');
        await writer.query(
          `INSERT INTO runs (id, workspace_id, user_id, status, metadata, decision, started_at)
        VALUES (gen_random_uuid(), $1, 'old', 'RUNNING', ${RUN_VALUES})`,
          [ws],
        );
        const migrating = migrate(upgrading);
        // Past the pool's timeout, the migration still waits on the lock.
        await new Promise((resolve) => setTimeout(resolve, 400));
        await writer.query('COMMIT');
        expect(await migrating).toEqual([8]);
        expect(await total(ws, 'RUNNING')).toBe(1);
        // The pool's statements keep their timeout.
        await expect(upgrading.query('SELECT pg_sleep(0.3)')).rejects.toThrow(/statement timeout/);
      } finally {
        await writer.end();
        await upgrading.close();
      }
    },
  );
});
