/**
 * Today's picture for the dashboard's overview: denials by reason, top users and models by spend,
 * unpriced model calls. "Today" is the workspace's local day. Step figures other than spend are read from the
 * steps of runs started today (the runs listing index finds them; steps have no index by time):
 * a step today in a run started yesterday is not in them.
 */
import type { Queryable } from './db.js';

export interface Overview {
  denials: { reason: string; count: number }[];
  topUsers: { userId: string; spendMicros: number; runs: number }[];
  topModels: { model: string; spendUsd: string; calls: number; tokens: number }[];
  unpriced: { model: string; calls: number; tokens: number }[];
}

export async function readOverview(
  db: Queryable,
  workspaceId: string,
  day: string,
  dayStartMs: number,
  limit: number,
): Promise<Overview> {
  const dayStart = new Date(dayStartMs);
  const [denials, users, models, unpriced] = await Promise.all([
    db.query<{ reason: string; count: string | number }>(
      `SELECT reason, sum(n) AS count FROM (
         SELECT decision->>'reason' AS reason, count(*) AS n FROM runs
         WHERE workspace_id = $1 AND status = 'BLOCKED' AND started_at >= $2 GROUP BY 1
         UNION ALL
         SELECT s.decision->>'reason', count(*) FROM runs r JOIN steps s ON s.run_id = r.id
         WHERE r.workspace_id = $1 AND r.started_at >= $2 AND s.status = 'BLOCKED' GROUP BY 1
       ) d WHERE reason IS NOT NULL GROUP BY reason ORDER BY count DESC, reason`,
      [workspaceId, dayStart],
    ),
    db.query<{ user_id: string; spend_micros: string | number; runs: string | number }>(
      `SELECT user_id, spend_micros, runs FROM user_usage_daily
       WHERE workspace_id = $1 AND day = $2::date AND (spend_micros > 0 OR runs > 0)
       ORDER BY spend_micros DESC, runs DESC, user_id LIMIT $3`,
      [workspaceId, day, limit],
    ),
    // Spend is read by when a step finished (the index the reconcile reads), as the counters count it.
    db.query<{ model: string; spend: string; calls: string | number; tokens: string | number }>(
      `SELECT coalesce(model, tool_name, '(none)') AS model, sum(cost_usd)::text AS spend, count(*) AS calls,
         coalesce(sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)), 0) AS tokens
       FROM steps WHERE workspace_id = $1 AND finished_at >= $2 AND cost_usd IS NOT NULL
       GROUP BY 1 ORDER BY sum(cost_usd) DESC, 1 LIMIT $3`,
      [workspaceId, dayStart, limit],
    ),
    db.query<{ model: string; calls: string | number; tokens: string | number }>(
      `SELECT s.model, count(*) AS calls,
         coalesce(sum(coalesce(s.prompt_tokens, 0) + coalesce(s.completion_tokens, 0)), 0) AS tokens
       FROM runs r JOIN steps s ON s.run_id = r.id
       WHERE r.workspace_id = $1 AND r.started_at >= $2 AND s.type = 'MODEL_CALL' AND s.model IS NOT NULL
         AND s.cost_usd IS NULL AND s.status IN ('COMPLETED', 'FAILED')
         AND (coalesce(s.prompt_tokens, 0) + coalesce(s.completion_tokens, 0)) > 0
       GROUP BY s.model ORDER BY calls DESC, s.model LIMIT $3`,
      [workspaceId, dayStart, limit],
    ),
  ]);
  return {
    denials: denials.rows.map((row) => ({ reason: row.reason, count: Number(row.count) })),
    topUsers: users.rows.map((row) => ({
      userId: row.user_id,
      spendMicros: Number(row.spend_micros),
      runs: Number(row.runs),
    })),
    topModels: models.rows.map((row) => ({
      model: row.model,
      spendUsd: row.spend,
      calls: Number(row.calls),
      tokens: Number(row.tokens),
    })),
    unpriced: unpriced.rows.map((row) => ({ model: row.model, calls: Number(row.calls), tokens: Number(row.tokens) })),
  };
}
