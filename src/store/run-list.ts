/** Runs as the API lists them: a page of summaries with their totals and models. */
import type { RunPage, RunStatus, RunSummary } from '../contract/runs.js';
import { numericToUsd } from '../money/decimal.js';
import type { Queryable } from './db.js';
import { RUN_MODELS_KEPT } from './runs.js';
import { unpricedCall } from './unpriced-usage.js';

export interface RunListQuery {
  status: RunStatus | null;
  userId: string | null;
  page: number;
  perPage: number;
  /** Runs started at or after this instant (the dashboard's time range); absent: no bound. */
  startedFrom?: Date | null;
  /** Runs started before this instant; absent: no bound. */
  startedBefore?: Date | null;
  /** Only the runs this API key started (an agent key's list); absent: every run. */
  apiKeyId?: string | null;
  /** Only the runs carrying every one of these tags (key, value); absent or empty: every run. */
  tags?: readonly (readonly [string, string])[] | null;
}

const iso = (timestamp: unknown): string | null =>
  timestamp === null || timestamp === undefined ? null : new Date(timestamp as Date).toISOString();

function runSummary(row: Record<string, unknown>): RunSummary {
  return {
    id: String(row.id),
    user_id: String(row.user_id),
    status: row.status as RunStatus,
    started_at: iso(row.started_at)!,
    ended_at: iso(row.ended_at),
    step_count: Number(row.step_count),
    total_tokens: Number(row.total_tokens),
    total_cost_usd: numericToUsd(row.total_cost_usd as string)!,
    tags: row.tags as Record<string, string>,
    models: row.models as string[],
    unpriced_calls: Number(row.unpriced_calls),
    denied_steps: Number(row.denied_steps),
    denial_reason: (row.denial_reason ?? null) as RunSummary['denial_reason'],
  };
}

/** Steps `s` summed as a run's totals: what a run from before migration 6, which keeps none, reads. */
const STEP_SUMS = `count(*) AS step_count,
  coalesce(sum(coalesce(s.prompt_tokens, 0) + coalesce(s.completion_tokens, 0)), 0) AS total_tokens,
  coalesce(sum(s.cost_usd), 0) AS total_cost_usd`;

/** What the list adds to the sums: the unpriced calls, and the denied steps with the last one's reason. */
const LIST_SUMS = `${STEP_SUMS},
  count(*) FILTER (WHERE ${unpricedCall('s')}) AS unpriced_calls,
  count(*) FILTER (WHERE s.status = 'BLOCKED') AS denied_steps,
  (array_agg(s.decision->>'reason' ORDER BY s.created_at DESC, s.sequence DESC) FILTER (WHERE s.status = 'BLOCKED'))[1] AS last_denial`;

/**
 * Run `r`'s unpriced calls and denials (migration 25): kept as its totals are, or else `summed`.
 * A BLOCKED run's reason is its own decision's (`run_denial`).
 */
const denialsOf = (summed: string) => `CASE WHEN r.step_count IS NULL THEN coalesce(${summed}.unpriced_calls, 0)
    ELSE coalesce(rt.unpriced_calls, 0) END AS unpriced_calls,
  CASE WHEN r.step_count IS NULL THEN coalesce(${summed}.denied_steps, 0) ELSE r.denied_steps END AS denied_steps,
  CASE WHEN r.status = 'BLOCKED' THEN r.run_denial WHEN r.step_count IS NULL THEN ${summed}.last_denial
    ELSE r.last_denial END AS denial_reason`;

/** Run `r`'s totals: kept (its `step_count`, and run_totals as `rt`), or else the `summed` ones. */
const totalsOf = (summed: string) => `coalesce(r.step_count, ${summed}.step_count, 0) AS step_count,
  CASE WHEN r.step_count IS NULL THEN coalesce(${summed}.total_tokens, 0) ELSE coalesce(rt.total_tokens, 0) END AS total_tokens,
  CASE WHEN r.step_count IS NULL THEN coalesce(${summed}.total_cost_usd, 0) ELSE coalesce(rt.total_cost_usd, 0) END AS total_cost_usd`;

/**
 * A run's totals as `t`, where the run is `r` (with its `step_count`): kept with its steps' writes
 * (its row and run_totals). A run from before migration 6 has no count: its totals are summed
 * from its steps (by `steps_run_sequence`), and only its (the summing is skipped for the others).
 */
export const RUN_TOTALS = `LEFT JOIN run_totals rt ON rt.run_id = r.id
  CROSS JOIN LATERAL (
    SELECT ${totalsOf('summed')}
    FROM (SELECT ${STEP_SUMS} FROM steps s WHERE s.run_id = r.id AND r.step_count IS NULL) summed) t`;

export async function listRuns(db: Queryable, workspaceId: string, query: RunListQuery): Promise<RunPage> {
  const where = ['workspace_id = $1'];
  const params: unknown[] = [workspaceId];
  if (query.status) where.push(`status = $${params.push(query.status)}`);
  if (query.userId !== null) where.push(`user_id = $${params.push(query.userId)}`);
  if (query.startedFrom) where.push(`started_at >= $${params.push(query.startedFrom)}`);
  if (query.startedBefore) where.push(`started_at < $${params.push(query.startedBefore)}`);
  if (query.apiKeyId) where.push(`api_key_id = $${params.push(query.apiKeyId)}`);
  // One containment test a pair: each can use runs_tagged, and a key asked with two values
  // matches no run (as it should: a run has one value a key).
  for (const [key, value] of query.tags ?? [])
    where.push(`tags @> $${params.push(JSON.stringify({ [key]: value }))}::jsonb`);
  const tagged = Boolean(query.tags?.length);
  const timeBound = Boolean(query.startedFrom || query.startedBefore || query.apiKeyId || tagged);
  const filter = where.join(' AND ');
  const [{ rows }, { rows: countRows }] = await Promise.all([
    // Only the page's runs from before migration 6 are summed. Not RUN_TOTALS's lateral sum: the
    // planner costs it for every listed run, skipped or not, and past jit_above_cost a page of
    // runs of 20,000 steps spent ~10 ms compiling a plan that runs in well under one.
    db.query(
      `WITH page AS (
         SELECT id, user_id, status, started_at, ended_at, step_count, models, tags, denied_steps, last_denial,
           decision->>'reason' AS run_denial
         FROM runs WHERE ${filter}
         ORDER BY started_at DESC, id DESC LIMIT $${params.length + 1} OFFSET $${params.length + 2}
       ), summed AS (
         SELECT s.run_id, ${LIST_SUMS}
         FROM steps s WHERE s.run_id IN (SELECT id FROM page WHERE step_count IS NULL) GROUP BY s.run_id
       )
       SELECT r.id, r.user_id, r.status, r.started_at, r.ended_at, ${totalsOf('l')}, r.tags, r.models, ${denialsOf('l')}
       FROM page r LEFT JOIN run_totals rt ON rt.run_id = r.id LEFT JOIN summed l ON l.run_id = r.id
       ORDER BY r.started_at DESC, r.id DESC`,
      [...params, query.perPage, (query.page - 1) * query.perPage],
    ),
    // Without a user, the counts Postgres keeps (migration 8): a few rows, however many runs. A
    // user's runs, or a time range's, are counted through the listing indexes; a tag's, by runs_tagged.
    query.userId === null && !timeBound
      ? db.query<{ total: string | number }>(
          `SELECT coalesce(sum(runs), 0) AS total FROM run_counts WHERE ${filter}`,
          params,
        )
      : db.query<{ total: string | number }>(`SELECT count(*) AS total FROM runs WHERE ${filter}`, params),
  ]);
  const unkept = rows.filter((row) => row.models === null).map((row) => String(row.id));
  if (unkept.length) {
    const named = await modelsFromSteps(db, unkept);
    for (const row of rows) if (row.models === null) row.models = named.get(String(row.id)) ?? [];
  }
  return { items: rows.map(runSummary), total: Number(countRows[0]!.total), page: query.page, per_page: query.perPage };
}

/** Whether the API key started the run (what an agent key may read). */
export async function runStartedBy(
  db: Queryable,
  workspaceId: string,
  runId: string,
  apiKeyId: string,
): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM runs WHERE id = $1 AND workspace_id = $2 AND api_key_id = $3', [
    runId,
    workspaceId,
    apiKeyId,
  ]);
  return rows.length > 0;
}

/**
 * The models of runs that keep none (from before migration 18), read from their steps: a
 * statement apart, made only for a page that holds such runs. In the listing's statement, the
 * planner costs this read for every listed run, kept or not, and a page of long runs would
 * cross jit_above_cost (see listRuns).
 */
async function modelsFromSteps(db: Queryable, runIds: string[]): Promise<Map<string, string[]>> {
  const { rows } = await db.query<{ run_id: string; models: string[] }>(
    `SELECT run_id, (array_agg(model ORDER BY first_sequence))[1:${RUN_MODELS_KEPT}] AS models FROM (
       SELECT run_id, model, min(sequence) AS first_sequence FROM steps
       WHERE run_id = ANY ($1::uuid[]) AND model IS NOT NULL GROUP BY run_id, model
     ) used GROUP BY run_id`,
    [runIds],
  );
  return new Map(rows.map((row) => [row.run_id, row.models]));
}
