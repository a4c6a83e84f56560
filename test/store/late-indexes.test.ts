/**
 * The indexes built after the migrations: concurrently on Postgres (by one of the daemons that
 * start together, and again where a build was cut short), at once on the embedded database,
 * by the daemon itself at start; and the reconcile's statements can read the steps through them.
 */
import pg from 'pg';
import type { Logger } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USAGE_DRIFT, USER_USAGE_DRIFT } from '../../src/store/reconcile.js';
import { ADVISORY_LOCKS } from '../../src/store/advisory-locks.js';
import { buildLateIndexes, buildLateIndexesNow, LATE_INDEXES } from '../../src/store/late-indexes.js';
import { postgresDb, type Db } from '../../src/store/db.js';
import { spawnDaemonOnPostgres } from '../support/daemon.js';
import { openTestStores, type TestStores } from '../support/harness.js';

/** The index's oid and validity; null when there is none. */
async function indexState(db: Db): Promise<{ oid: string; valid: boolean } | null> {
  const { rows } = await db.query<{ oid: string; valid: boolean }>(
    `SELECT i.indexrelid::text AS oid, i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE c.relname = 'steps_priced_finish'`,
  );
  return rows[0] ?? null;
}

describe('late indexes on Postgres', () => {
  let stores: TestStores;
  let url: string;
  beforeAll(async () => {
    stores = await openTestStores('postgres+sql');
    url = stores.databaseUrl!;
  });
  afterAll(async () => {
    await stores?.close();
  });

  /** A logger that keeps the messages it is given. */
  const recorder = () => {
    const messages: string[] = [];
    const log = (_fields: unknown, message: string) => void messages.push(message);
    return { messages, logger: { info: log, warn: log } as unknown as Logger };
  };

  /**
   * Holds any index build on steps at its wait for the table's writers: a transaction that could
   * write to it stays open until `release`.
   */
  async function holdBuilds(): Promise<{ release(): Promise<void> }> {
    const writer = new pg.Client({ connectionString: url });
    await writer.connect();
    await writer.query('BEGIN');
    await writer.query('LOCK TABLE steps IN ROW EXCLUSIVE MODE');
    return {
      async release() {
        await writer.query('ROLLBACK');
        await writer.end();
      },
    };
  }

  /** Resolves once the builder's connection waits on a lock. */
  async function builderWaiting(): Promise<void> {
    for (let i = 0; i < 100; i++) {
      const { rows } = await stores.db.query(
        `SELECT 1 FROM pg_stat_activity WHERE application_name = 'runguard-indexes' AND wait_event_type = 'Lock'`,
      );
      if (rows.length > 0) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error('the build never waited');
  }

  it('are built by one of the builders started together', async () => {
    expect(await indexState(stores.db)).toBeNull(); // the migrations do not build it
    const logs = [recorder(), recorder(), recorder()];
    await Promise.all(logs.map((log) => buildLateIndexes(url, log.logger).done));
    expect(await indexState(stores.db)).toMatchObject({ valid: true });
    // One built them; the others found the lock taken and went on (no failure logged).
    expect(logs.flatMap((log) => log.messages)).toEqual(LATE_INDEXES.map(() => 'index built'));
  });

  it('leave a valid index as it is', async () => {
    const before = await indexState(stores.db);
    await buildLateIndexes(url).done;
    expect(await indexState(stores.db)).toEqual(before);
  });

  it('hold no lock that the other daemons take while a build waits', async () => {
    await stores.db.exec('DROP INDEX steps_priced_finish');
    const hold = await holdBuilds();
    const build = buildLateIndexes(url);
    try {
      await builderWaiting();
      for (const [name, id] of Object.entries(ADVISORY_LOCKS)) {
        if (name === 'lateIndexes') continue;
        const { rows } = await stores.db.query<{ taken: boolean }>('SELECT pg_try_advisory_lock($1) AS taken', [id]);
        expect({ name, taken: rows[0]!.taken }).toEqual({ name, taken: true });
        await stores.db.query('SELECT pg_advisory_unlock($1)', [id]);
      }
    } finally {
      await build.stop();
      await hold.release();
    }
  });

  it('stop a waiting build, and the next one drops what it left and builds again', async () => {
    await buildLateIndexes(url).done; // whatever the test before left
    await stores.db.exec('DROP INDEX steps_priced_finish');
    const hold = await holdBuilds();
    const log = recorder();
    const build = buildLateIndexes(url, log.logger);
    await builderWaiting();
    await build.stop();
    const left = await indexState(stores.db);
    await hold.release();
    expect(left).toMatchObject({ valid: false }); // what a cut CREATE INDEX CONCURRENTLY leaves
    expect(log.messages).toEqual([]); // a stop is no failure
    await buildLateIndexes(url).done;
    const after = await indexState(stores.db);
    expect(after).toMatchObject({ valid: true });
    expect(after!.oid).not.toBe(left!.oid);
  });

  it("serve the reconcile's statements", async () => {
    await buildLateIndexes(url).done;
    await stores.db.transaction(async (tx) => {
      // On a table this small a sequential scan is cheaper: this asks whether the index can serve.
      await tx.query('SET LOCAL enable_seqscan = off');
      for (const statement of [USAGE_DRIFT, USER_USAGE_DRIFT]) {
        const { rows } = await tx.query<{ 'QUERY PLAN': string }>(
          `EXPLAIN ${statement.replaceAll('$1', `'2026-01-01'`)}`,
        );
        expect(rows.map((r) => r['QUERY PLAN']).join('\n')).toContain('steps_priced_finish');
      }
    });
  });
});

describe('late indexes on the embedded database', () => {
  // Opened in a hook: starting PGlite is set-up, and on a loaded machine it can take most of a
  // test's 30 s by itself (issue #33).
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores('embedded');
  });
  afterAll(async () => {
    await stores?.close();
  });

  it('are built at once', async () => {
    await buildLateIndexesNow(stores.db);
    await buildLateIndexesNow(stores.db); // again: nothing to do
    expect(await indexState(stores.db)).toMatchObject({ valid: true });
  });
});

describe('late indexes in the daemon', () => {
  // Started in a hook, with the hook's minute to get healthy: on a loaded machine a daemon's start
  // (a node process, its migrations) outlasts the default 20 s, and the test's 30 s with it (issue #33).
  let daemon: Awaited<ReturnType<typeof spawnDaemonOnPostgres>>;
  let db: Db;
  beforeAll(async () => {
    daemon = await spawnDaemonOnPostgres({ startTimeoutMs: 50_000 });
    db = postgresDb({ connectionString: daemon.database.url, max: 1 });
  });
  afterAll(async () => {
    await db?.close();
    await daemon?.close();
  });

  it('are built by the daemon on Postgres while it serves', async () => {
    await expect.poll(() => indexState(db), { timeout: 25_000, interval: 100 }).toMatchObject({ valid: true });
  });
});
