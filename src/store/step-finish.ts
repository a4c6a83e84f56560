/** Step results: each step's record finished and priced, with its run's totals and the day's spend. */
import { costSql, pricedSql } from '../money/cost.js';
import { SPEND_CAP_MICROS, type DailySpend } from './counters/counters.js';
import { STEP_SUBJECTS } from './subject-usage.js';
import type { Queryable } from './db.js';
import { firstMentions } from './runs.js';
import { toolCostSql } from './tool-pricing.js';
import { unpricedCall } from './unpriced-usage.js';

export interface StepResult {
  status: 'COMPLETED' | 'FAILED';
  durationMs: number | null;
  promptTokens: number | null;
  completionTokens: number | null;
  /** Parts of `promptTokens` read from and written to the provider's prompt cache. */
  cacheReadTokens?: number | null;
  cacheWriteTokens?: number | null;
  /** Part of `completionTokens` spent reasoning: recorded, priced as output. */
  reasoningTokens?: number | null;
  outputData?: unknown;
  /**
   * The model the call's answer named: it becomes the step's model, and prices it, only when the
   * step has none (a proxied request that named no model).
   */
  model?: string | null;
  /** A tool call that never reached its tool (its server down): no price per call is charged. */
  toolNotReached?: boolean;
}

/** A step result's token counts (`v`), priced by src/money/cost.ts's rule. */
const RESULT_TOKENS = {
  prompt: 'v.prompt_tokens',
  completion: 'v.completion_tokens',
  cacheRead: 'v.cache_read_tokens',
  cacheWrite: 'v.cache_write_tokens',
};

export interface StepFinish {
  workspaceId: string;
  runId: string;
  stepId: string;
  result: StepResult;
  now: Date;
  /** The UTC day whose spend the cost counts in. */
  day: string;
}

export interface FinishedStep {
  id: string;
  status: StepResult['status'];
  user_id: string;
  /** The cost rounded half-up to microdollars, added to the day's spend. */
  cost_micros: number;
  /** The day's spend totals right after this statement's costs; null when it cost nothing. */
  totals: DailySpend | null;
}

type FinishRow = {
  id: string;
  /** The finish's place in the statement's document. */
  ordinal: number;
  status: StepResult['status'];
  cost_micros: string | number | null;
  user_id: string;
  workspace_total: string | number | null;
  user_total: string | number | null;
  /** The step's subjects' day totals (key and tag budgets), by subject; null: none. */
  subject_totals: Record<string, string | number> | string | null;
};

// The daily upserts add each workspace's and user's costs once, and return the day's totals
// read under their row locks: what a counter copy needs. Rows are locked in one order
// everywhere (workspaces, then users, each sorted), so concurrent writers cannot deadlock.
// The LIMIT, as in insertSteps: planned for 100 finishes, a steps table of tens of thousands of
// rows was read in full on every batch, instead of each step by its key.
// MATERIALIZED: the document is parsed once. Inlined (v is read once below), a plan that scans
// steps and looks each one up in v parsed the whole document again per step found: a batch of n
// finishes parsed n x n records, the Postgres CPU of a 64-connection run's step pairs.
const FINISH_STEPS = `WITH v AS MATERIALIZED (
       SELECT * FROM json_to_recordset($1::json)
         AS v(workspace_id uuid, run_id uuid, step_id uuid, status text, duration_ms bigint, prompt_tokens bigint,
           completion_tokens bigint, cache_read_tokens bigint, cache_write_tokens bigint, reasoning_tokens bigint,
           output_json json, finished_at timestamptz, day date, model text, tool_not_reached boolean, ordinal int)
       LIMIT $2
     ), step AS (
       UPDATE steps s SET status = v.status, duration_ms = v.duration_ms, prompt_tokens = v.prompt_tokens,
         completion_tokens = v.completion_tokens, cached_prompt_tokens = v.cache_read_tokens,
         cache_write_tokens = v.cache_write_tokens, reasoning_tokens = v.reasoning_tokens, output_json = v.output_json,
         finished_at = v.finished_at, model = coalesce(s.model, v.model),
         cost_usd = CASE WHEN s.type = 'TOOL_CALL' AND s.model IS NULL THEN
           CASE WHEN v.tool_not_reached IS NOT TRUE THEN ${toolCostSql('s')} END
         WHEN ${pricedSql(RESULT_TOKENS)} THEN (
           SELECT ${costSql(RESULT_TOKENS, 'p')}
           FROM model_pricing p
           WHERE p.workspace_id = s.workspace_id AND p.model = coalesce(s.model, v.model) AND p.is_active) END
       FROM v
       WHERE s.id = v.step_id AND s.run_id = v.run_id AND s.workspace_id = v.workspace_id AND s.status = 'ALLOWED'
       RETURNING s.id, s.run_id, s.workspace_id, s.status, v.day, v.ordinal, s.cost_usd, s.api_key_id,
         coalesce(s.prompt_tokens, 0) + coalesce(s.completion_tokens, 0) AS tokens,
         CASE WHEN s.cost_usd IS NOT NULL THEN least(round(s.cost_usd * 1000000), ${SPEND_CAP_MICROS}) END AS cost_micros,
         ${unpricedCall('s')} AS unpriced
     ), priced AS (
       SELECT step.*, r.user_id, r.step_count, ${STEP_SUBJECTS('step', 'r')} AS subjects
       FROM step JOIN runs r ON r.id = step.run_id
     ), run_total AS (
       INSERT INTO run_totals AS t (run_id, total_tokens, total_cost_usd, unpriced_calls)
       SELECT run_id, sum(tokens), coalesce(sum(cost_usd), 0), count(*) FILTER (WHERE unpriced)
       FROM priced WHERE step_count IS NOT NULL
       GROUP BY run_id HAVING sum(tokens) <> 0 OR sum(cost_usd) <> 0 OR bool_or(unpriced) ORDER BY run_id
       ON CONFLICT (run_id) DO UPDATE SET total_tokens = t.total_tokens + EXCLUDED.total_tokens,
         total_cost_usd = t.total_cost_usd + EXCLUDED.total_cost_usd,
         unpriced_calls = t.unpriced_calls + EXCLUDED.unpriced_calls
     ), workspace_day AS (
       INSERT INTO usage_daily AS d (workspace_id, day, spend_micros)
       SELECT workspace_id, day, least(sum(cost_micros), ${SPEND_CAP_MICROS}) FROM priced WHERE cost_micros > 0
       GROUP BY workspace_id, day ORDER BY workspace_id, day
       ON CONFLICT (workspace_id, day) DO UPDATE SET spend_micros = least(d.spend_micros + EXCLUDED.spend_micros, ${SPEND_CAP_MICROS})
       RETURNING workspace_id, day, spend_micros
     ), user_day AS (
       INSERT INTO user_usage_daily AS d (workspace_id, user_id, day, spend_micros)
       SELECT p.workspace_id, p.user_id, p.day, least(sum(p.cost_micros), ${SPEND_CAP_MICROS})
       FROM priced p JOIN workspace_day w ON w.workspace_id = p.workspace_id AND w.day = p.day
       WHERE p.cost_micros > 0
       GROUP BY p.workspace_id, p.user_id, p.day ORDER BY p.workspace_id, p.user_id, p.day
       ON CONFLICT (workspace_id, user_id, day) DO UPDATE SET spend_micros = least(d.spend_micros + EXCLUDED.spend_micros, ${SPEND_CAP_MICROS})
       RETURNING workspace_id, user_id, day, spend_micros
     ), subject_day AS (
       INSERT INTO subject_usage_daily AS d (workspace_id, subject, day, spend_micros)
       SELECT p.workspace_id, x.subject, p.day, least(sum(p.cost_micros), ${SPEND_CAP_MICROS})
       FROM priced p CROSS JOIN LATERAL unnest(p.subjects) AS x(subject)
         JOIN workspace_day w ON w.workspace_id = p.workspace_id AND w.day = p.day
       WHERE p.cost_micros > 0
       GROUP BY p.workspace_id, x.subject, p.day ORDER BY p.workspace_id, x.subject, p.day
       ON CONFLICT (workspace_id, subject, day) DO UPDATE SET spend_micros = least(d.spend_micros + EXCLUDED.spend_micros, ${SPEND_CAP_MICROS})
       RETURNING workspace_id, subject, day, spend_micros
     )
     SELECT p.id, p.ordinal, p.status, p.cost_micros, p.user_id, w.spend_micros AS workspace_total, u.spend_micros AS user_total,
       (SELECT json_object_agg(d.subject, d.spend_micros) FROM subject_day d
         WHERE d.workspace_id = p.workspace_id AND d.day = p.day AND d.subject = ANY(p.subjects)) AS subject_totals
     FROM priced p
     LEFT JOIN workspace_day w ON w.workspace_id = p.workspace_id AND w.day = p.day
     LEFT JOIN user_day u ON u.workspace_id = p.workspace_id AND u.user_id = p.user_id AND u.day = p.day`;

/** A finish as a row of the statement's JSON document, at `ordinal` in it. */
const finishRecord = (finish: StepFinish, ordinal: number) => ({
  workspace_id: finish.workspaceId,
  run_id: finish.runId,
  step_id: finish.stepId,
  status: finish.result.status,
  duration_ms: finish.result.durationMs,
  prompt_tokens: finish.result.promptTokens,
  completion_tokens: finish.result.completionTokens,
  cache_read_tokens: finish.result.cacheReadTokens ?? null,
  cache_write_tokens: finish.result.cacheWriteTokens ?? null,
  reasoning_tokens: finish.result.reasoningTokens ?? null,
  output_json: finish.result.outputData ?? null,
  finished_at: finish.now,
  day: finish.day,
  model: finish.result.model?.toWellFormed() ?? null,
  tool_not_reached: finish.result.toolNotReached ?? null,
  ordinal,
});

/**
 * Finishes ALLOWED steps (one statement for any number): stores each result, prices it from the
 * model's active pricing entry in exact NUMERIC arithmetic, and adds the tokens, costs and unpriced
 * calls to their runs' totals and the costs to the day's spend. Answers per step, in order: null when
 * there is no ALLOWED step of that id in the run. A step named twice is finished by its first
 * mention only.
 */
export async function finishSteps(db: Queryable, finishes: readonly StepFinish[]): Promise<(FinishedStep | null)[]> {
  // A step named twice goes into the document once, keyed as the statement matches a step: a
  // mention under another workspace or run is another step's, and must not take this one's finish.
  const key = (workspaceId: string, runId: string, stepId: string) => `${workspaceId}/${runId}/${stepId}`.toLowerCase();
  const { unique, isFirst } = firstMentions(finishes, (finish) => key(finish.workspaceId, finish.runId, finish.stepId));
  // One JSON document for the batch, as in insertSteps; a row answers with its finish's place in it.
  const { rows } = await db.query<FinishRow>(FINISH_STEPS, [JSON.stringify(unique.map(finishRecord)), unique.length]);
  const found: (FinishRow | undefined)[] = new Array(unique.length);
  for (const row of rows) found[row.ordinal] = row;
  // Each finish's place in the document: its own, unless a step named twice left some out.
  const places = unique === finishes ? null : new Map(unique.map((finish, place) => [finish, place]));
  return finishes.map((finish, i) => {
    const step = isFirst(i) ? found[places ? places.get(finish)! : i] : undefined;
    if (!step) return null;
    const costMicros = Number(step.cost_micros ?? 0);
    if (costMicros === 0)
      return { id: step.id, status: step.status, user_id: step.user_id, cost_micros: 0, totals: null };
    const totals: DailySpend = {
      workspaceDailySpendMicros: Number(step.workspace_total),
      userDailySpendMicros: Number(step.user_total),
    };
    const subjects = subjectTotals(step.subject_totals);
    if (subjects) totals.subjects = subjects;
    return { id: step.id, status: step.status, user_id: step.user_id, cost_micros: costMicros, totals };
  });
}

/** The day totals of subjects as a statement answers them (JSON), as counter totals. */
export function subjectTotals(value: Record<string, string | number> | string | null): DailySpend['subjects'] {
  if (value === null) return undefined;
  const totals = (typeof value === 'string' ? JSON.parse(value) : value) as Record<string, string | number>;
  return Object.fromEntries(Object.entries(totals).map(([subject, total]) => [subject, { day: Number(total) }]));
}
