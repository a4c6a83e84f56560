/**
 * Tool prices (migration 20): a price per call for the tools matching a pattern over
 * `{server}.{tool}`. The statement that finishes a step prices a TOOL_CALL with `toolCostSql`,
 * choosing the pattern as `mostSpecific` (src/rules/tool-patterns.ts) does.
 */
import type { Queryable } from './db.js';

export interface ToolPriceRow {
  pattern: string;
  /** Exact decimal text. */
  per_call_usd: string;
  updated_at: Date;
}

/** The pattern as LIKE reads it: `*` is `%`, and LIKE's own `%`, `_` and `\` are escaped. */
function likePattern(pattern: string): string {
  return pattern.replace(/[\\%_]/g, (special) => `\\${special}`).replaceAll('*', '%');
}

export async function putToolPrice(
  db: Queryable,
  workspaceId: string,
  pattern: string,
  perCallUsd: string,
  now: Date,
): Promise<ToolPriceRow> {
  const literal = pattern.replaceAll('*', '').length;
  const { rows } = await db.query<{ pattern: string; per_call_usd: string; updated_at: Date }>(
    `INSERT INTO tool_pricing (workspace_id, pattern, like_pattern, literal_chars, stars, per_call_usd, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6::numeric, $7)
     ON CONFLICT (workspace_id, pattern) DO UPDATE SET per_call_usd = EXCLUDED.per_call_usd, updated_at = EXCLUDED.updated_at
     RETURNING pattern, per_call_usd::text AS per_call_usd, updated_at`,
    [workspaceId, pattern, likePattern(pattern), literal, pattern.length - literal, perCallUsd, now],
  );
  return rows[0]!;
}

export async function listToolPrices(db: Queryable, workspaceId: string): Promise<ToolPriceRow[]> {
  const { rows } = await db.query<ToolPriceRow>(
    `SELECT pattern, per_call_usd::text AS per_call_usd, updated_at FROM tool_pricing
     WHERE workspace_id = $1 ORDER BY pattern`,
    [workspaceId],
  );
  return rows;
}

export async function deleteToolPrice(db: Queryable, workspaceId: string, pattern: string): Promise<boolean> {
  const { rowCount } = await db.query('DELETE FROM tool_pricing WHERE workspace_id = $1 AND pattern = $2', [
    workspaceId,
    pattern,
  ]);
  return (rowCount ?? 0) > 0;
}

/**
 * A TOOL_CALL step's price as a SQL expression over a step row aliased `step`: the per-call price
 * of the most specific pattern its tool matches; NULL when none does.
 */
export function toolCostSql(step: string): string {
  return `(SELECT tp.per_call_usd FROM tool_pricing tp
    WHERE tp.workspace_id = ${step}.workspace_id AND ${step}.tool_name LIKE tp.like_pattern
    ORDER BY (tp.stars = 0) DESC, tp.literal_chars DESC, tp.stars, tp.pattern COLLATE "C" LIMIT 1)`;
}
