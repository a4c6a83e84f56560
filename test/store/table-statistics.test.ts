/**
 * The steps and runs tables are analyzed as the daemon grows them (src/store/table-statistics.ts):
 * once at 1,000, 10,000 and 100,000 rows written, never between and never after, so generic plans
 * made while the table was empty are made again with its size; not on the embedded database; a
 * failed ANALYZE is handed to the caller, not thrown.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../../src/store/db.js';
import { TableStatistics } from '../../src/store/table-statistics.js';
import { openTestStores, type TestStores } from '../support/harness.js';

describe('table statistics on postgres', () => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores('postgres+sql');
  });
  afterAll(async () => {
    await stores?.close();
  });

  const analyzed = async (table: string) => {
    const { rows } = await stores.db.query<{ n: number }>(
      'SELECT analyze_count::int AS n FROM pg_stat_user_tables WHERE relname = $1',
      [table],
    );
    return rows[0]!.n;
  };

  it('when the daemon writes past each threshold, then the table is analyzed once there', async () => {
    const failures: unknown[] = [];
    const statistics = new TableStatistics(stores.db, 'steps', (error) => failures.push(error));
    const before = await analyzed('steps');
    const after = async (rows: number) => {
      statistics.wrote(rows);
      await statistics.settled();
      return (await analyzed('steps')) - before;
    };
    expect(await after(999)).toBe(0);
    expect(await after(1)).toBe(1);
    expect(await after(8_999)).toBe(1);
    // One batch past two thresholds analyzes once.
    expect(await after(200_000)).toBe(2);
    expect(await after(1_000_000)).toBe(2);
    expect(failures).toEqual([]);
  });

  it('when the runs table grows, then it is analyzed, and steps is not', async () => {
    const statistics = new TableStatistics(stores.db, 'runs', () => {});
    const [runs, steps] = [await analyzed('runs'), await analyzed('steps')];
    statistics.wrote(1_000);
    await statistics.settled();
    expect(await analyzed('runs')).toBe(runs + 1);
    expect(await analyzed('steps')).toBe(steps);
  });
});

describe('table statistics elsewhere', () => {
  const fakeDb = (kind: Db['kind'], exec: () => Promise<void>) => ({ kind, exec }) as unknown as Db;

  it('when an ANALYZE fails, then the error goes to the callback and later thresholds still run', async () => {
    let calls = 0;
    const failures: unknown[] = [];
    const statistics = new TableStatistics(
      fakeDb('postgres', async () => {
        calls++;
        throw new Error('must be owner of table steps');
      }),
      'steps',
      (error) => failures.push(error),
    );
    statistics.wrote(1_000);
    await statistics.settled();
    statistics.wrote(9_000);
    await expect(statistics.settled()).resolves.toBeUndefined();
    expect(calls).toBe(2);
    expect(failures.map((error) => (error as Error).message)).toEqual([
      'must be owner of table steps',
      'must be owner of table steps',
    ]);
  });

  it('when the database is the embedded one, then nothing is analyzed', async () => {
    let calls = 0;
    const statistics = new TableStatistics(
      fakeDb('embedded', async () => {
        calls++;
      }),
      'steps',
      () => {},
    );
    statistics.wrote(1_000_000);
    await statistics.settled();
    expect(calls).toBe(0);
  });
});
