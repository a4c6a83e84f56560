/**
 * The purge of Idempotency-Key records past their retention, against real stores: old records go
 * in batches until none is left, records inside the retention stay (to the millisecond), two
 * purgers at once delete each record once, a replay inside the retention still answers after a
 * purge, and the stale-run sweeper's timer purges at its own slower cadence and stops cleanly.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { createStaleRunSweeper } from '../../src/jobs/stale-run-sweeper.js';
import type { Queryable } from '../../src/store/db.js';
import { findAnswer, IDEMPOTENCY_RETENTION_HOURS, purgeExpiredAnswers } from '../../src/store/idempotency.js';
import { BACKENDS, openTestStores, startTestApi, type TestApi, type TestStores } from '../support/harness.js';

const HOUR = 3_600_000;
const RETENTION = IDEMPOTENCY_RETENTION_HOURS * HOUR;
const log = createLogger('silent');

/** Records of a workspace of their own, created at the given times; answers their keys in order. */
async function seed(db: Queryable, workspaceId: string, times: Date[]): Promise<string[]> {
  const keys = times.map((_, i) => `k${String(i).padStart(5, '0')}-${randomUUID()}`);
  await db.query(
    `INSERT INTO idempotency_keys (workspace_id, key, fingerprint, status_code, response, created_at)
     SELECT $1, k, 'fp', 201, jsonb_build_object('key', k), t FROM unnest($2::text[], $3::timestamptz[]) AS x(k, t)`,
    [workspaceId, keys, times],
  );
  return keys;
}

async function keysOf(db: Queryable, workspaceId: string): Promise<string[]> {
  const { rows } = await db.query<{ key: string }>(
    'SELECT key FROM idempotency_keys WHERE workspace_id = $1 ORDER BY key',
    [workspaceId],
  );
  return rows.map((r) => r.key);
}

/** The statements a purge runs, counted. */
function counting(db: Queryable): Queryable & { statements: number[] } {
  const statements: number[] = [];
  return {
    statements,
    async query(sql, params) {
      const result = await db.query(sql, params);
      statements.push(result.rowCount);
      return result as never;
    },
    exec: (sql) => db.exec(sql),
  };
}

// The tests below share a database and a purge deletes across workspaces: each test's now is
// earlier than the one's before it, so what an earlier test leaves is inside the later's retention.
describe.each(BACKENDS)('idempotency record purge on %s', (backend) => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores(backend);
  });
  afterAll(async () => {
    await stores?.close();
  });

  it('when records are past their retention, then they are purged in batches until none is left, and the others stay', async () => {
    const workspaceId = randomUUID();
    const now = new Date('2031-09-04T05:06:07.089Z');
    const at = (msAgo: number) => new Date(now.getTime() - msAgo);
    // 12 past the retention: 30 days down to exactly the retention (findAnswer's bound: absent).
    const old = await seed(stores.db, workspaceId, [
      ...Array.from({ length: 11 }, (_, i) => at(30 * 24 * HOUR - i * HOUR)),
      at(RETENTION),
    ]);
    // Inside it: a millisecond short of the retention, an hour old, just written.
    const recent = await seed(stores.db, workspaceId, [at(RETENTION - 1), at(HOUR), now]);
    expect(await findAnswer(stores.db, workspaceId, old[11]!, now)).toBeNull(); // absent before any purge
    expect(await findAnswer(stores.db, workspaceId, recent[0]!, now)).toMatchObject({ statusCode: 201 });

    const db = counting(stores.db);
    expect(await purgeExpiredAnswers(db, now, { batchSize: 5 })).toBe(12);
    expect(db.statements).toEqual([5, 5, 2]);
    expect(await keysOf(stores.db, workspaceId)).toEqual(recent);
    expect(await findAnswer(stores.db, workspaceId, recent[0]!, now)).toMatchObject({
      statusCode: 201,
      body: { key: recent[0] },
    });

    // Nothing left to purge: one statement, nothing deleted.
    const again = counting(stores.db);
    expect(await purgeExpiredAnswers(again, now, { batchSize: 5 })).toBe(0);
    expect(again.statements).toEqual([0]);
    expect(await keysOf(stores.db, workspaceId)).toEqual(recent);
  });

  it('when two purgers run at once, then every old record is deleted exactly once', async () => {
    const workspaceId = randomUUID();
    const now = new Date('2031-08-05T06:07:08.000Z');
    const old = Array.from({ length: 230 }, (_, i) => new Date(now.getTime() - RETENTION - 1 - i * 1000));
    await seed(stores.db, workspaceId, old);
    const recent = await seed(stores.db, workspaceId, [new Date(now.getTime() - HOUR)]);
    const purged = await Promise.all([
      purgeExpiredAnswers(stores.db, now, { batchSize: 20 }),
      purgeExpiredAnswers(stores.db, now, { batchSize: 20 }),
    ]);
    // A purger stops at a short batch, which the other's locked rows may cause: what is left, the
    // next purge takes.
    const rest = await purgeExpiredAnswers(stores.db, now, { batchSize: 20 });
    expect(purged[0] + purged[1] + rest).toBe(old.length);
    expect(await keysOf(stores.db, workspaceId)).toEqual(recent);
  });

  it('when the sweeper runs on its timer, then it purges at once, not again before its own interval, and stops cleanly', async () => {
    const workspaceId = randomUUID();
    const now = new Date('2031-07-06T07:08:09.000Z');
    const clock = { now: () => now };
    const old = () => Array.from({ length: 7 }, (_, i) => new Date(now.getTime() - RETENTION - (i + 1) * HOUR));
    await seed(stores.db, workspaceId, old());
    const recent = await seed(stores.db, workspaceId, [new Date(now.getTime() - HOUR)]);
    let sweeps = 0;
    const sweeper = createStaleRunSweeper({
      db: stores.db,
      clock,
      logger: log,
      idleMs: HOUR,
      intervalMs: 10,
      onEnded: () => sweeps++,
      idempotencyPurgeIntervalMs: HOUR,
      idempotencyPurgeBatchSize: 3,
    });
    sweeper.start();
    try {
      const deadline = Date.now() + 5_000;
      while ((await keysOf(stores.db, workspaceId)).length > 1 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 10));
      expect(await keysOf(stores.db, workspaceId)).toEqual(recent);
      // Old records again: the sweep ticks every 10 ms, the purge waits for its hour.
      const later = await seed(stores.db, workspaceId, old());
      await new Promise((r) => setTimeout(r, 200));
      expect(await keysOf(stores.db, workspaceId)).toEqual([...later, ...recent].sort());
    } finally {
      await sweeper.stop();
    }
    expect(sweeps).toBe(0); // no runs here: the sweep ran and ended none

    // With the sweep off, the timer runs for the purge alone.
    const purgeOnly = createStaleRunSweeper({
      db: stores.db,
      clock,
      logger: log,
      idleMs: HOUR,
      intervalMs: 0,
      idempotencyPurgeIntervalMs: 20,
    });
    purgeOnly.start();
    try {
      const deadline = Date.now() + 5_000;
      while ((await keysOf(stores.db, workspaceId)).length > 1 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 10));
    } finally {
      await purgeOnly.stop();
    }
    expect(await keysOf(stores.db, workspaceId)).toEqual(recent);
  });
});

describe.each(BACKENDS)('idempotent run starts across a purge on %s', (backend) => {
  let api: TestApi;
  let now = new Date('2031-06-07T08:00:00.000Z');
  beforeAll(async () => {
    api = await startTestApi(backend, { clock: { now: () => now } });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('when a purge ran, then a retry inside the retention gets the first answer, and one past it starts a new run', async () => {
    const start = (key: string) => api.request('POST', '/v1/runs', { user_id: 'retrying' }, { 'idempotency-key': key });
    const first = now;
    const older = await start('older');
    expect(older.status).toBe(201);
    now = new Date(first.getTime() + 20 * HOUR);
    const newer = await start('newer');
    expect(newer.status).toBe(201);

    // 30 hours after the first start: its record is past the retention, the second's is not.
    now = new Date(first.getTime() + 30 * HOUR);
    expect(await purgeExpiredAnswers(api.stores.db, now)).toBe(1);
    const { rows } = await api.stores.db.query<{ key: string }>(
      'SELECT key FROM idempotency_keys WHERE workspace_id = $1',
      [api.workspaceId],
    );
    expect(rows.map((r) => r.key)).toEqual(['newer']);

    const replayed = await start('newer');
    expect(replayed.status).toBe(newer.status);
    expect(replayed.body).toEqual(newer.body);
    const anew = await start('older');
    expect(anew.status).toBe(201);
    expect(anew.body.id).not.toBe(older.body.id);
    const { rows: runs } = await api.stores.db.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM runs WHERE workspace_id = $1',
      [api.workspaceId],
    );
    expect(runs[0]!.n).toBe(3);
  });
});
