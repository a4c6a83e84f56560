/** SDK users of a workspace: blocking, per-user budgets, today's spend and run counts. */
import type { Queryable } from './db.js';

export interface SdkUserRow {
  user_id: string;
  blocked: boolean;
  daily_budget_micros: number | null;
  daily_spend_micros: number;
  run_count: number;
  first_seen_at: Date;
  last_seen_at: Date;
}

const COLUMNS = `u.user_id, u.blocked, u.daily_budget_micros, u.run_count, u.first_seen_at, u.last_seen_at,
  coalesce(d.spend_micros, 0) AS daily_spend_micros`;
const SPEND_JOIN = `LEFT JOIN user_usage_daily d ON d.workspace_id = u.workspace_id AND d.user_id = u.user_id AND d.day = $2`;

function toUser(row: Record<string, unknown>): SdkUserRow {
  return {
    user_id: String(row.user_id),
    blocked: Boolean(row.blocked),
    daily_budget_micros: row.daily_budget_micros === null ? null : Number(row.daily_budget_micros),
    daily_spend_micros: Number(row.daily_spend_micros),
    run_count: Number(row.run_count),
    first_seen_at: row.first_seen_at as Date,
    last_seen_at: row.last_seen_at as Date,
  };
}

export async function listUsers(
  db: Queryable,
  workspaceId: string,
  day: string,
  query: { blocked: boolean | null; page: number; perPage: number; search?: string | null },
) {
  // The blocked filter is NULL for all users; so is the search (a case-insensitive substring of the id).
  const search = query.search ? query.search.toLowerCase() : null;
  const [{ rows }, { rows: count }] = await Promise.all([
    db.query(
      `SELECT ${COLUMNS} FROM sdk_users u ${SPEND_JOIN}
       WHERE u.workspace_id = $1 AND ($3::boolean IS NULL OR u.blocked = $3)
         AND ($6::text IS NULL OR strpos(lower(u.user_id), $6) > 0)
       ORDER BY u.last_seen_at DESC, u.user_id LIMIT $4 OFFSET $5`,
      [workspaceId, day, query.blocked, query.perPage, (query.page - 1) * query.perPage, search],
    ),
    db.query<{ total: string | number }>(
      `SELECT count(*) AS total FROM sdk_users u WHERE u.workspace_id = $1 AND ($2::boolean IS NULL OR u.blocked = $2)
         AND ($3::text IS NULL OR strpos(lower(u.user_id), $3) > 0)`,
      [workspaceId, query.blocked, search],
    ),
  ]);
  return { items: rows.map(toUser), total: Number(count[0]!.total) };
}

/** One user with the day's spend; `forUpdate` locks the row until the transaction ends. */
export async function getUser(
  db: Queryable,
  workspaceId: string,
  userId: string,
  day: string,
  options: { forUpdate?: boolean } = {},
): Promise<SdkUserRow | null> {
  const { rows } = await db.query(
    `SELECT ${COLUMNS} FROM sdk_users u ${SPEND_JOIN} WHERE u.workspace_id = $1 AND u.user_id = $3${options.forUpdate ? ' FOR UPDATE OF u' : ''}`,
    [workspaceId, day, userId],
  );
  return rows[0] ? toUser(rows[0]) : null;
}

/** Creates the user when never seen (so a user can be blocked before their first run). */
export async function upsertUser(
  db: Queryable,
  workspaceId: string,
  userId: string,
  day: string,
  changes: { blocked?: boolean; daily_budget_micros?: number | null },
  now: Date,
): Promise<SdkUserRow> {
  await db.query(
    `INSERT INTO sdk_users AS u (workspace_id, user_id, blocked, daily_budget_micros, first_seen_at, last_seen_at)
     VALUES ($1, $2, coalesce($3, false), $4, $6, $6)
     ON CONFLICT (workspace_id, user_id) DO UPDATE SET
       blocked = coalesce($3, u.blocked),
       daily_budget_micros = CASE WHEN $5 THEN $4 ELSE u.daily_budget_micros END`,
    [
      workspaceId,
      userId,
      changes.blocked ?? null,
      changes.daily_budget_micros ?? null,
      changes.daily_budget_micros !== undefined,
      now,
    ],
  );
  const { rows } = await db.query(
    `SELECT ${COLUMNS} FROM sdk_users u ${SPEND_JOIN} WHERE u.workspace_id = $1 AND u.user_id = $3`,
    [workspaceId, day, userId],
  );
  return toUser(rows[0]!);
}

/** Spend and allowed runs per UTC day, oldest first, days without activity included as zero. */
export async function dailyUsage(db: Queryable, workspaceId: string, today: string, days: number) {
  const { rows } = await db.query<{ day: string; spend_micros: string | number; runs: string | number }>(
    `SELECT g.day::date::text AS day, coalesce(d.spend_micros, 0) AS spend_micros, coalesce(d.runs, 0) AS runs
     FROM generate_series($2::date - ($3::int - 1), $2::date, interval '1 day') AS g(day)
     LEFT JOIN usage_daily d ON d.workspace_id = $1 AND d.day = g.day::date
     ORDER BY g.day`,
    [workspaceId, today, days],
  );
  return rows.map((row) => ({ day: row.day, spendMicros: Number(row.spend_micros), runs: Number(row.runs) }));
}
