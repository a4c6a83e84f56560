/**
 * A day's TOOL_CALL steps per tool (`{server}.{tool}`): what GET /v1/tools/usage answers.
 *
 * Read through the runs (their listing index, then each run's steps by its key), as unpriced usage
 * is: steps are found in runs started from the day before until the day's end, or still running.
 */
import type { Queryable } from './db.js';

export interface ToolUsageCounts {
  tool: string;
  calls: number;
  denied: number;
  failed: number;
  /** The exact sum of the steps' NUMERIC costs, as text. */
  spend: string;
}

/** `[dayStart, dayEnd)`: the workspace's local day. */
export async function toolUsage(
  db: Queryable,
  workspaceId: string,
  dayStart: Date,
  dayEnd: Date,
): Promise<ToolUsageCounts[]> {
  const { rows } = await db.query<{
    tool: string;
    calls: string;
    denied: string;
    failed: string;
    spend: string;
  }>(
    `WITH recent AS (
       SELECT id FROM runs WHERE workspace_id = $1
         AND started_at >= $2::timestamptz - interval '1 day' AND started_at < $3::timestamptz
       UNION
       SELECT id FROM runs WHERE workspace_id = $1 AND status = 'RUNNING'
     )
     SELECT s.tool_name AS tool, count(*) AS calls,
            count(*) FILTER (WHERE s.status = 'BLOCKED') AS denied,
            count(*) FILTER (WHERE s.status = 'FAILED') AS failed,
            coalesce(sum(s.cost_usd), 0)::text AS spend
     FROM recent r JOIN steps s ON s.run_id = r.id
     WHERE s.type = 'TOOL_CALL' AND s.tool_name IS NOT NULL
       AND s.created_at >= $2::timestamptz AND s.created_at < $3::timestamptz
     GROUP BY s.tool_name ORDER BY calls DESC, s.tool_name`,
    [workspaceId, dayStart, dayEnd],
  );
  return rows.map((row) => ({
    tool: row.tool,
    calls: Number(row.calls),
    denied: Number(row.denied),
    failed: Number(row.failed),
    spend: row.spend,
  }));
}
