/** Run and step records, and the durable usage counters written with them. */
import type { Decision } from '../rules/engine.js';
import { numericToUsd } from '../money/decimal.js';
import { SPEND_CAP_MICROS, type DailySpend } from './counters.js';
import type { Queryable } from './db.js';

export type RunStatus = 'RUNNING' | 'COMPLETED' | 'FAILED' | 'BLOCKED';
export type StepStatus = 'ALLOWED' | 'COMPLETED' | 'FAILED' | 'BLOCKED';
export type StepType = 'INPUT' | 'MODEL_CALL' | 'TOOL_CALL' | 'OUTPUT' | 'REASONING' | 'SYSTEM';

export interface NewRun {
  id: string;
  workspaceId: string;
  userId: string;
  status: 'RUNNING' | 'BLOCKED';
  metadata: unknown;
  decision: Decision;
  now: Date;
  day: string;
}

/**
 * Records a run start; an allowed one also counts in the day's usage (and so the month's).
 * One statement (data-modifying CTEs) rather than four: a run start holds the workspace's
 * admission lock until it commits, so every round trip saved here shortens the queue behind it.
 */
export async function insertRun(tx: Queryable, run: NewRun): Promise<void> {
  const allowed = run.status === 'RUNNING' ? 1 : 0;
  await tx.query(
    // The daily rows are locked in one order everywhere (workspace, then user): user_day reads
    // workspace_day, so it cannot run first. Unordered CTEs deadlocked against finishStep.
    `WITH run AS (
       INSERT INTO runs (id, workspace_id, user_id, status, metadata, decision, started_at, ended_at, last_activity_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $7)
     ), sdk_user AS (
       INSERT INTO sdk_users AS u (workspace_id, user_id, run_count, first_seen_at, last_seen_at)
       VALUES ($2, $3, $9, $7, $7)
       ON CONFLICT (workspace_id, user_id) DO UPDATE SET run_count = u.run_count + $9, last_seen_at = $7
     ), workspace_day AS (
       INSERT INTO usage_daily AS d (workspace_id, day, runs) SELECT $2, $10::date, 1 WHERE $9::int = 1
       ON CONFLICT (workspace_id, day) DO UPDATE SET runs = d.runs + 1
       RETURNING 1
     )
     INSERT INTO user_usage_daily AS d (workspace_id, user_id, day, runs) SELECT $2, $3, $10::date, 1 FROM workspace_day
     ON CONFLICT (workspace_id, user_id, day) DO UPDATE SET runs = d.runs + 1`,
    [run.id, run.workspaceId, run.userId, run.status, json(run.metadata), json(run.decision), run.now,
      run.status === 'BLOCKED' ? run.now : null, allowed, run.day],
  );
}

/** JSON for a jsonb parameter: pg would send arrays as Postgres arrays, so always stringify. */
function json(value: unknown): string | null {
  return value === null || value === undefined ? null : JSON.stringify(value);
}

export interface EndedRun {
  id: string;
  status: RunStatus;
  ended_at: Date;
  user_id: string;
}

/** Ends a RUNNING run; null when there is no RUNNING run of that id in the workspace. */
export async function endRun(
  db: Queryable,
  workspaceId: string,
  runId: string,
  status: 'COMPLETED' | 'FAILED',
  now: Date,
): Promise<EndedRun | null> {
  const { rows } = await db.query<EndedRun>(
    `UPDATE runs SET status = $3, ended_at = $4
     WHERE id = $1 AND workspace_id = $2 AND status = 'RUNNING'
     RETURNING id, status, ended_at, user_id`,
    [runId, workspaceId, status, now],
  );
  return rows[0] ?? null;
}

export async function runExists(db: Queryable, workspaceId: string, runId: string): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM runs WHERE id = $1 AND workspace_id = $2', [runId, workspaceId]);
  return rows.length > 0;
}

export interface NewStep {
  id: string;
  runId: string;
  workspaceId: string;
  /** Null: the server assigns the next sequence of the run. */
  sequence: number | null;
  type: StepType;
  status: 'ALLOWED' | 'BLOCKED';
  model: string | null;
  toolName: string | null;
  inputData: unknown;
  decision: Decision;
  now: Date;
}

/**
 * Records a step and bumps its run's counters in one statement, so a step exists only in a run
 * that was RUNNING when it was written. Null when the run is no longer RUNNING. A used sequence
 * raises the unique violation of `steps_run_sequence`.
 */
export async function insertStep(db: Queryable, step: NewStep): Promise<{ sequence: number } | null> {
  const { rows } = await db.query<{ sequence: number }>(
    `WITH r AS (
       UPDATE runs SET step_count = step_count + 1, last_activity_at = $10,
         max_sequence = CASE WHEN $4::int IS NULL THEN max_sequence + 1 ELSE greatest(max_sequence, $4::int) END
       WHERE id = $2 AND workspace_id = $3 AND status = 'RUNNING'
       RETURNING id, coalesce($4::int, max_sequence) AS sequence
     )
     INSERT INTO steps (id, run_id, workspace_id, sequence, type, status, model, tool_name, input_data, decision, created_at)
     SELECT $1, r.id, $3, r.sequence, $5, $6, $7, $8, $9, $11, $10 FROM r
     RETURNING sequence`,
    [step.id, step.runId, step.workspaceId, step.sequence, step.type, step.status, step.model, step.toolName,
      json(step.inputData), step.now, json(step.decision)],
  );
  return rows[0] ?? null;
}

export interface StepResult {
  status: 'COMPLETED' | 'FAILED';
  durationMs: number | null;
  promptTokens: number | null;
  completionTokens: number | null;
  cachedPromptTokens?: number | null;
  outputData?: unknown;
}

export interface FinishedStep {
  id: string;
  status: StepStatus;
  user_id: string;
  /** The cost rounded half-up to microdollars, added to the day's spend. */
  cost_micros: number;
  /** The day's spend totals right after this cost; null when it cost nothing. */
  totals: DailySpend | null;
}

/**
 * Finishes an ALLOWED step: stores the result, prices it from the model's active pricing entry
 * in exact NUMERIC arithmetic, and adds the cost to the run totals and the day's spend.
 * Null when there is no ALLOWED step of that id in the run.
 */
export async function finishStep(
  tx: Queryable,
  workspaceId: string,
  runId: string,
  stepId: string,
  result: StepResult,
  now: Date,
  day: string,
): Promise<FinishedStep | null> {
  const hasTokens = result.promptTokens !== null || result.completionTokens !== null;
  // One statement instead of four: fewer round trips while the row locks are held. The daily
  // upserts run only for a priced step, and return the day's totals right after this cost, read
  // under their row locks: what a counter copy needs. user_day reads workspace_day, so the daily
  // rows are locked in one order everywhere (workspace, then user).
  const { rows } = await tx.query<{
    id: string;
    status: StepStatus;
    cost_micros: string | number | null;
    user_id: string;
    workspace_total: string | number | null;
    user_total: string | number | null;
  }>(
    `WITH step AS (
       UPDATE steps s SET status = $4, duration_ms = $5, prompt_tokens = $6, completion_tokens = $7,
         cached_prompt_tokens = $8, output_data = $9, finished_at = $10,
         cost_usd = CASE WHEN $11::boolean THEN (
           SELECT coalesce($6::bigint, 0) * p.input_cost_per_token + coalesce($7::bigint, 0) * p.output_cost_per_token
           FROM model_pricing p WHERE p.workspace_id = s.workspace_id AND p.model = s.model AND p.is_active) END
       WHERE s.id = $3 AND s.run_id = $2 AND s.workspace_id = $1 AND s.status = 'ALLOWED'
       RETURNING s.id, s.status, s.cost_usd, CASE WHEN s.cost_usd IS NOT NULL THEN least(round(s.cost_usd * 1000000), ${SPEND_CAP_MICROS}) END AS cost_micros,
         coalesce(s.prompt_tokens, 0) + coalesce(s.completion_tokens, 0) AS tokens
     ), run AS (
       UPDATE runs SET total_tokens = total_tokens + step.tokens,
         total_cost_usd = total_cost_usd + coalesce(step.cost_usd, 0)
       FROM step WHERE runs.id = $2 RETURNING runs.user_id
     ), workspace_day AS (
       INSERT INTO usage_daily AS d (workspace_id, day, spend_micros)
       SELECT $1, $12::date, step.cost_micros FROM step WHERE step.cost_micros > 0
       ON CONFLICT (workspace_id, day) DO UPDATE SET spend_micros = least(d.spend_micros + EXCLUDED.spend_micros, ${SPEND_CAP_MICROS})
       RETURNING spend_micros
     ), user_day AS (
       INSERT INTO user_usage_daily AS d (workspace_id, user_id, day, spend_micros)
       SELECT $1, run.user_id, $12::date, step.cost_micros FROM step, run, workspace_day
       ON CONFLICT (workspace_id, user_id, day) DO UPDATE SET spend_micros = least(d.spend_micros + EXCLUDED.spend_micros, ${SPEND_CAP_MICROS})
       RETURNING spend_micros
     )
     SELECT step.id, step.status, step.cost_micros, run.user_id,
       (SELECT spend_micros FROM workspace_day) AS workspace_total,
       (SELECT spend_micros FROM user_day) AS user_total
     FROM step, run`,
    [workspaceId, runId, stepId, result.status, result.durationMs, result.promptTokens, result.completionTokens,
      result.cachedPromptTokens ?? null, json(result.outputData), now, hasTokens, day],
  );
  const step = rows[0];
  if (!step) return null;
  const costMicros = Number(step.cost_micros ?? 0);
  if (costMicros === 0) return { id: step.id, status: step.status, user_id: step.user_id, cost_micros: 0, totals: null };
  const totals = {
    workspaceDailySpendMicros: Number(step.workspace_total),
    userDailySpendMicros: Number(step.user_total),
  };
  return { id: step.id, status: step.status, user_id: step.user_id, cost_micros: costMicros, totals };
}

export async function stepExists(db: Queryable, workspaceId: string, runId: string, stepId: string): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM steps WHERE id = $1 AND run_id = $2 AND workspace_id = $3', [
    stepId, runId, workspaceId,
  ]);
  return rows.length > 0;
}

// --- Reads ---------------------------------------------------------------------------------

export interface RunListQuery {
  status: RunStatus | null;
  userId: string | null;
  page: number;
  perPage: number;
}

const iso = (d: unknown): string | null => (d === null || d === undefined ? null : new Date(d as Date).toISOString());

function runSummary(row: Record<string, unknown>) {
  return {
    id: String(row.id),
    user_id: String(row.user_id),
    status: row.status as RunStatus,
    started_at: iso(row.started_at)!,
    ended_at: iso(row.ended_at),
    step_count: Number(row.step_count),
    total_tokens: Number(row.total_tokens),
    total_cost_usd: numericToUsd(row.total_cost_usd as string)!,
  };
}

export type RunSummary = ReturnType<typeof runSummary>;

export async function listRuns(db: Queryable, workspaceId: string, q: RunListQuery) {
  const where = ['workspace_id = $1'];
  const params: unknown[] = [workspaceId];
  if (q.status) where.push(`status = $${params.push(q.status)}`);
  if (q.userId !== null) where.push(`user_id = $${params.push(q.userId)}`);
  const filter = where.join(' AND ');
  const [{ rows }, { rows: countRows }] = await Promise.all([
    db.query(
      `SELECT id, user_id, status, started_at, ended_at, step_count, total_tokens, total_cost_usd
       FROM runs WHERE ${filter} ORDER BY started_at DESC, id DESC
       LIMIT ${q.perPage} OFFSET ${(q.page - 1) * q.perPage}`,
      params,
    ),
    db.query<{ total: string | number }>(`SELECT count(*) AS total FROM runs WHERE ${filter}`, params),
  ]);
  return { items: rows.map(runSummary), total: Number(countRows[0]!.total), page: q.page, per_page: q.perPage };
}

function stepView(row: Record<string, unknown>) {
  const decision = row.decision as Decision;
  return {
    id: String(row.id),
    type: row.type as StepType,
    status: row.status as StepStatus,
    sequence: Number(row.sequence),
    model: (row.model as string | null) ?? null,
    tool_name: (row.tool_name as string | null) ?? null,
    prompt_tokens: row.prompt_tokens === null ? null : Number(row.prompt_tokens),
    completion_tokens: row.completion_tokens === null ? null : Number(row.completion_tokens),
    cached_prompt_tokens: row.cached_prompt_tokens === null ? null : Number(row.cached_prompt_tokens),
    cost_usd: row.cost_usd === null ? null : Number(row.cost_usd),
    duration_ms: row.duration_ms === null ? null : Number(row.duration_ms),
    input_data: row.input_data ?? null,
    output_data: row.output_data ?? null,
    decision: { outcome: decision.outcome, reason: decision.reason, evaluated_rules: decision.evaluated_rules },
    created_at: iso(row.created_at)!,
  };
}

/**
 * A run with its steps, read in one statement: one snapshot, so the run's totals always agree
 * with its steps (two queries could see a step committed between them).
 */
export async function getRunDetail(db: Queryable, workspaceId: string, runId: string, now: Date) {
  const { rows } = await db.query<Record<string, unknown> & { steps_json: Record<string, unknown>[] }>(
    `SELECT r.*, coalesce((SELECT json_agg(s ORDER BY s.sequence) FROM steps s WHERE s.run_id = r.id), '[]') AS steps_json
     FROM runs r WHERE r.id = $1 AND r.workspace_id = $2`,
    [runId, workspaceId],
  );
  const row = rows[0];
  if (!row) return null;
  const started = new Date(row.started_at as Date).getTime();
  const ended = row.ended_at ? new Date(row.ended_at as Date).getTime() : now.getTime();
  return {
    ...runSummary(row),
    metadata: row.metadata ?? null,
    decision: row.decision as Decision,
    duration_ms: Math.max(0, ended - started),
    steps: row.steps_json.map(stepView),
  };
}
