/**
 * The indexes built after the migrations: concurrently on Postgres (by one of the daemons that
 * start together, and again where a build was cut short), at once on the embedded database,
 * by the daemon itself at start; and the reconcile's statements can read the steps through them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USAGE_DRIFT, USER_USAGE_DRIFT } from '../../src/service/reconcile.js';
import { buildLateIndexes, buildLateIndexesNow } from '../../src/store/late-indexes.js';
import type { Db } from '../../src/store/db.js';
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

  it('are built once by builders started together', async () => {
    expect(await indexState(stores.db)).toBeNull(); // the migrations do not build it
    const builds = [buildLateIndexes(url), buildLateIndexes(url), buildLateIndexes(url)];
    await Promise.all(builds.map((b) => b.done));
    expect(await indexState(stores.db)).toMatchObject({ valid: true });
  });

  it('leave a valid index as it is', async () => {
    const before = await indexState(stores.db);
    await buildLateIndexes(url).done;
    expect(await indexState(stores.db)).toEqual(before);
  });

  it('drop and build again an index a cut build left invalid', async () => {
    const before = await indexState(stores.db);
    // What an interrupted CREATE INDEX CONCURRENTLY leaves behind.
    await stores.db.query(`UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'steps_priced_finish'::regclass`);
    await buildLateIndexes(url).done;
    const after = await indexState(stores.db);
    expect(after).toMatchObject({ valid: true });
    expect(after!.oid).not.toBe(before!.oid);
  });

  it('stop when asked, and the next build completes', async () => {
    await stores.db.exec('DROP INDEX steps_priced_finish');
    const build = buildLateIndexes(url);
    await build.stop();
    expect(await indexState(stores.db)).toBeNull();
    await buildLateIndexes(url).done;
    expect(await indexState(stores.db)).toMatchObject({ valid: true });
  });

  it("serve the reconcile's statements", async () => {
    await stores.db.transaction(async (tx) => {
      // On a table this small a sequential scan is cheaper: this asks whether the index can serve.
      await tx.query('SET LOCAL enable_seqscan = off');
      for (const statement of [USAGE_DRIFT, USER_USAGE_DRIFT]) {
        const { rows } = await tx.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${statement.replaceAll('$1', `'2026-01-01'`)}`);
        expect(rows.map((r) => r['QUERY PLAN']).join('\n')).toContain('steps_priced_finish');
      }
    });
  });
});

describe('late indexes elsewhere', () => {
  it('are built at once on the embedded database', async () => {
    const stores = await openTestStores('embedded');
    try {
      await buildLateIndexesNow(stores.db);
      await buildLateIndexesNow(stores.db); // again: nothing to do
      expect(await indexState(stores.db)).toMatchObject({ valid: true });
    } finally {
      await stores.close();
    }
  });

  it('are built by the daemon on Postgres while it serves', async () => {
    const daemon = await spawnDaemonOnPostgres();
    const pgStores = { db: null as Db | null };
    try {
      const { postgresDb } = await import('../../src/store/db.js');
      pgStores.db = postgresDb({ connectionString: daemon.database.url, max: 1 });
      const deadline = Date.now() + 15_000;
      let state = await indexState(pgStores.db);
      while (!state?.valid && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        state = await indexState(pgStores.db);
      }
      expect(state).toMatchObject({ valid: true });
    } finally {
      await pgStores.db?.close();
      await daemon.close();
    }
  });
});
