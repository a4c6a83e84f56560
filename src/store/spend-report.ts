/**
 * Spend of finished steps between two instants, grouped: what `GET /v1/usage/report` answers. A
 * step counts on the day it finished (as the daily spend records do), in whole microdollars
 * rounded per step as those records round them, so a report's total equals the records' sum.
 * No index serves it: a report reads the workspace's steps, as the reconcile does.
 */
import type { ReportGroup } from '../contract/index.js';
import { SPEND_CAP_MICROS } from './counters/counters.js';
import type { Queryable } from './db.js';

export interface SpendGroupRow {
  key: string | null;
  spendMicros: bigint;
  tokens: number;
  calls: number;
  unpricedCalls: number;
}

/**
 * `$4` is the workspace's time zone (for days), or the tag's name. A step's key is the key that
 * made it, as key budgets count it (a step from before migration 26 recorded none: its run's
 * key); its tag, its run's (null: the run has none of that name).
 */
const groupColumn = (group: ReportGroup): string => {
  if (group.startsWith('tag:')) return 'r.tags ->> $4';
  return {
    user: 'r.user_id',
    key: 'coalesce(s.api_key_id, r.api_key_id)::text',
    model: 's.model',
    day: '(s.finished_at AT TIME ZONE $4)::date::text',
  }[group as Exclude<ReportGroup, `tag:${string}`>];
};

const fourthParameter = (group: ReportGroup, timeZone: string): string[] => {
  if (group.startsWith('tag:')) return [group.slice('tag:'.length)];
  return group === 'day' ? [timeZone] : [];
};

export async function spendByGroup(
  db: Queryable,
  workspaceId: string,
  group: ReportGroup,
  range: { start: Date; end: Date; timeZone: string },
): Promise<SpendGroupRow[]> {
  const window = [workspaceId, range.start, range.end];
  const { rows } = await db.query<{
    key: string | null;
    spend_micros: string;
    tokens: string;
    calls: string;
    unpriced_calls: string;
  }>(
    `SELECT ${groupColumn(group)} AS key,
       -- least() skips nulls: without the filter an unpriced step would count as the cap.
       coalesce(sum(least(round(s.cost_usd * 1000000), ${SPEND_CAP_MICROS})) FILTER (WHERE s.cost_usd IS NOT NULL), 0)::bigint::text
         AS spend_micros,
       coalesce(sum(coalesce(s.prompt_tokens, 0) + coalesce(s.completion_tokens, 0)), 0)::text AS tokens,
       count(*)::text AS calls,
       count(*) FILTER (WHERE s.type = 'MODEL_CALL' AND s.cost_usd IS NULL
         AND (s.prompt_tokens IS NOT NULL OR s.completion_tokens IS NOT NULL))::text AS unpriced_calls
     FROM steps s JOIN runs r ON r.id = s.run_id
     WHERE s.workspace_id = $1 AND s.finished_at >= $2 AND s.finished_at < $3
     GROUP BY 1`,
    [...window, ...fourthParameter(group, range.timeZone)],
  );
  return rows.map((row) => ({
    key: row.key,
    spendMicros: BigInt(row.spend_micros),
    tokens: Number(row.tokens),
    calls: Number(row.calls),
    unpricedCalls: Number(row.unpriced_calls),
  }));
}
