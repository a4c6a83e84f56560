/**
 * Rebuilding the Redis copy from the records: every key of today and yesterday (local days, so
 * from two UTC days back) raised to the totals Postgres holds. Writes need not stop meanwhile:
 * they are max-merges of committed totals, so a cost committed after its read is carried by its
 * own write.
 */
import type { Redis } from 'ioredis';
import type { Db } from '../db.js';
import type { DailySpend } from './counters.js';
import { raiseArgs, type CounterScripts } from './redis-scripts.js';

/** Keys raised per round trip. */
const REBUILD_BATCH = 500;

/** Raises every key of today and yesterday to the records; answers how many keys it raised. */
export async function raiseCopyToRecords(db: Db, redis: Redis & CounterScripts): Promise<number> {
  return (await raiseDailyKeys(db, redis)) + (await raiseSubjectKeys(db, redis));
}

/** The workspaces' and users' keys, a batch of pairs per pipeline. */
async function raiseDailyKeys(db: Db, redis: Redis & CounterScripts): Promise<number> {
  const { rows } = await db.query<{
    workspace_id: string;
    user_id: string;
    day: string;
    ws: string;
    usr: string;
  }>(
    `SELECT u.workspace_id, u.user_id, u.day::text AS day, coalesce(w.spend_micros, 0) AS ws, u.spend_micros AS usr
     FROM user_usage_daily u LEFT JOIN usage_daily w ON w.workspace_id = u.workspace_id AND w.day = u.day
     WHERE u.day >= (now() AT TIME ZONE 'UTC')::date - 2`,
  );
  for (let i = 0; i < rows.length; i += REBUILD_BATCH) {
    const pipeline = redis.pipeline() as ReturnType<Redis['pipeline']> & {
      rgRaiseTo(...args: ReturnType<typeof raiseArgs>): unknown;
    };
    for (const row of rows.slice(i, i + REBUILD_BATCH)) {
      const scope = { workspaceId: row.workspace_id, userId: row.user_id, day: row.day };
      const totals = { workspaceDailySpendMicros: Number(row.ws), userDailySpendMicros: Number(row.usr) };
      pipeline.rgRaiseTo(...raiseArgs(scope, totals, 'raise'));
    }
    const results = (await pipeline.exec()) ?? [];
    const error = results.find(([commandError]) => commandError)?.[0];
    if (error) throw error;
  }
  return rows.length * 2;
}

/**
 * The subject keys (key and tag budgets'), one script call per workspace and day (its seal and
 * version are the workspace's).
 */
async function raiseSubjectKeys(db: Db, redis: Redis & CounterScripts): Promise<number> {
  const { rows } = await db.query<{ workspace_id: string; day: string; subjects: string[]; totals: string[] }>(
    `SELECT workspace_id, day::text AS day, array_agg(subject) AS subjects, array_agg(spend_micros::text) AS totals
     FROM subject_usage_daily WHERE day >= (now() AT TIME ZONE 'UTC')::date - 2 GROUP BY workspace_id, day`,
  );
  let keys = 0;
  for (const row of rows) {
    const totals: DailySpend = {
      workspaceDailySpendMicros: 0,
      userDailySpendMicros: 0,
      subjects: Object.fromEntries(row.subjects.map((subject, i) => [subject, { day: Number(row.totals[i]) }])),
    };
    await redis.rgRaiseTo(...raiseArgs({ workspaceId: row.workspace_id, day: row.day }, totals, 'raise'));
    keys += row.subjects.length;
  }
  return keys;
}
