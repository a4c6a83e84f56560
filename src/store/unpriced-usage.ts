/**
 * Today's model calls that were recorded with tokens and no price (their cost is null and counts
 * $0 against every budget), by model: what GET /v1/usage answers as `unpriced`.
 *
 * Read through the runs (their listing index, and the steps of each run by its key) rather than
 * by an index on steps: an index whose predicate names cost or tokens would make every result's
 * update of its step a non-HOT one. Steps are found in runs started in the 24 hours before today or
 * still running; a step of today in a run started earlier and ended since is not counted.
 */
import type { Queryable } from './db.js';

/**
 * Whether a step (its SQL alias) is an unpriced call: a model call recorded with tokens and no
 * cost. The CLI's `unpricedCalls` (src/cli/unpriced.ts) reads a run's steps by the same rule.
 */
export const unpricedCall = (step: string) =>
  `(${step}.type = 'MODEL_CALL' AND ${step}.cost_usd IS NULL AND (${step}.prompt_tokens IS NOT NULL OR ${step}.completion_tokens IS NOT NULL))`;

export interface UnpricedModelUsage {
  model: string | null;
  calls: number;
  tokens: number;
}

/** `dayStart`: the first instant of the workspace's local day. */
export async function unpricedUsage(db: Queryable, workspaceId: string, dayStart: Date): Promise<UnpricedModelUsage[]> {
  const { rows } = await db.query<{ model: string | null; calls: string | number; tokens: string | number }>(
    `WITH recent AS (
       SELECT id FROM runs WHERE workspace_id = $1 AND started_at >= $2::timestamptz - interval '1 day'
       UNION
       SELECT id FROM runs WHERE workspace_id = $1 AND status = 'RUNNING'
     )
     SELECT s.model, count(*) AS calls, coalesce(sum(coalesce(s.prompt_tokens, 0) + coalesce(s.completion_tokens, 0)), 0) AS tokens
     FROM recent r JOIN steps s ON s.run_id = r.id
     WHERE ${unpricedCall('s')} AND s.created_at >= $2::timestamptz
     GROUP BY s.model ORDER BY calls DESC, s.model`,
    [workspaceId, dayStart],
  );
  return rows.map((row) => ({ model: row.model, calls: Number(row.calls), tokens: Number(row.tokens) }));
}
