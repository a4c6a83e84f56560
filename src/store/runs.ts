/** Run and step records, and the durable usage counters written with them. */
import type { Decision } from '../rules/engine.js';
import { costSql, pricedSql } from '../money/cost.js';
import { toolCostSql } from './tool-pricing.js';
import { numericToUsd } from '../money/decimal.js';
import { SPEND_CAP_MICROS, type DailySpend } from './counters/counters.js';
import type { Queryable } from './db.js';
import type { RunLimitValues } from './workspaces.js';

import type { RunPage, RunStatus, RunSummary, StepStatus, StepType } from '../contract/runs.js';

export type { RunPage, RunStatus, RunSummary, StepStatus, StepType };

export interface NewRun {
  id: string;
  workspaceId: string;
  userId: string;
  status: 'RUNNING' | 'BLOCKED';
  metadata: unknown;
  decision: Decision;
  now: Date;
  day: string;
  /**
   * The daemon instance that ends the run (a run the proxy started for one call); null: its client ends
   * it. A dead instance's runs are ended by crash recovery (result-recovery.ts).
   */
  daemonId?: number | null;
  /** The API key that started it through the run API (an agent key reads only these runs). */
  apiKeyId?: string | null;
  /**
   * The run's first step, written in the same statement (a run the proxy starts for one call: one
   * commit before the call's answer is released, not two). Only for a RUNNING run; its sequence is 1.
   */
  firstStep?: NewStep;
  /**
   * A run with limits: the limits and its usage after the first step (none: 0 steps). Runs
   * without limits keep no usage.
   */
  guard?: RunGuardRecord;
}

/** What a run with limits keeps for its step checks (migration 17). */
export interface RunGuardRecord {
  limits: RunLimitValues;
  allowedSteps: number;
  lastCallHash: string | null;
  identicalCalls: number;
}

/**
 * Records run starts (one statement for any number); an allowed one also counts in the day's
 * usage (and so the month's). Every start in a workspace raises the same day row, so one commit
 * per start would queue them behind each other's row lock, one commit at a time; a batch raises
 * each row once. Data-modifying CTEs rather than four statements: a start in a transaction holds
 * the workspace's admission lock until it commits, so every round trip saved shortens that queue.
 */
export async function insertRuns(db: Queryable, runs: readonly NewRun[]): Promise<void> {
  const firstSteps = runs.flatMap((run) => (run.firstStep ? [run.firstStep] : []));
  // The daily rows are locked in one order everywhere (workspace, then user, each sorted):
  // user_day reads workspace_day, so it cannot run first. Unordered CTEs deadlocked against
  // finishSteps. Each upsert names a row once (GROUP BY): ON CONFLICT cannot update a row twice.
  // The batch is one JSON document, as in insertSteps; text made well-formed as there.
  await db.query(
    `WITH v AS (
       SELECT * FROM json_to_recordset($1::json)
         AS v(id uuid, workspace_id uuid, user_id text, status text, metadata jsonb, decision json,
           started_at timestamptz, ended_at timestamptz, day date, step_count integer, models text[],
           daemon_id integer, max_steps integer, max_cost_micros bigint, max_identical_calls integer,
           allowed_steps integer, last_call_hash text, identical_calls integer, api_key_id uuid)
       LIMIT $2
     ), run AS (
       INSERT INTO runs (id, workspace_id, user_id, status, metadata, decision, started_at, ended_at, step_count, models,
         daemon_id, max_steps, max_cost_micros, max_identical_calls, allowed_steps, last_call_hash, identical_calls,
         api_key_id)
       SELECT id, workspace_id, user_id, status, metadata, decision, started_at, ended_at, step_count, models,
         daemon_id, max_steps, max_cost_micros, max_identical_calls, allowed_steps, last_call_hash, identical_calls,
         api_key_id FROM v
     ), sdk_user AS (
       INSERT INTO sdk_users AS u (workspace_id, user_id, run_count, first_seen_at, last_seen_at)
       SELECT workspace_id, user_id, count(*) FILTER (WHERE status = 'RUNNING'), min(started_at), max(started_at)
       FROM v GROUP BY workspace_id, user_id ORDER BY workspace_id, user_id
       ON CONFLICT (workspace_id, user_id) DO UPDATE SET run_count = u.run_count + EXCLUDED.run_count,
         last_seen_at = greatest(u.last_seen_at, EXCLUDED.last_seen_at)
     ), first_step AS (
       INSERT INTO steps (${STEP_INSERT_COLUMNS})
       SELECT ${STEP_INSERT_COLUMNS} FROM (${stepRecordset(3, 4)}) s
     ), workspace_day AS (
       INSERT INTO usage_daily AS d (workspace_id, day, runs)
       SELECT workspace_id, day, count(*) FROM v WHERE status = 'RUNNING'
       GROUP BY workspace_id, day ORDER BY workspace_id, day
       ON CONFLICT (workspace_id, day) DO UPDATE SET runs = d.runs + EXCLUDED.runs
       RETURNING workspace_id, day
     )
     INSERT INTO user_usage_daily AS d (workspace_id, user_id, day, runs)
     SELECT v.workspace_id, v.user_id, v.day, count(*)
     FROM v JOIN workspace_day w ON w.workspace_id = v.workspace_id AND w.day = v.day
     WHERE v.status = 'RUNNING'
     GROUP BY v.workspace_id, v.user_id, v.day ORDER BY v.workspace_id, v.user_id, v.day
     ON CONFLICT (workspace_id, user_id, day) DO UPDATE SET runs = d.runs + EXCLUDED.runs`,
    [
      JSON.stringify(
        runs.map((run) => ({
          id: run.id,
          workspace_id: run.workspaceId,
          user_id: run.userId.toWellFormed(),
          status: run.status,
          metadata: run.metadata ?? null,
          decision: run.decision,
          started_at: run.now,
          ended_at: run.status === 'BLOCKED' ? run.now : null,
          day: run.day,
          step_count: run.firstStep ? 1 : 0,
          models: run.firstStep?.model ? [run.firstStep.model.toWellFormed()] : [],
          daemon_id: run.daemonId ?? null,
          api_key_id: run.apiKeyId ?? null,
          max_steps: run.guard?.limits.maxSteps ?? null,
          max_cost_micros: run.guard?.limits.maxCostMicros ?? null,
          max_identical_calls: run.guard?.limits.maxIdenticalCalls ?? null,
          allowed_steps: run.guard?.allowedSteps ?? null,
          last_call_hash: run.guard?.lastCallHash ?? null,
          identical_calls: run.guard?.identicalCalls ?? null,
        })),
      ),
      runs.length,
      JSON.stringify(firstSteps.map(stepRecord)),
      firstSteps.length,
    ],
  );
}

/**
 * The items of a batch that a statement should see: each key's first mention only (a later one
 * is answered null). `isFirst(item, i)` tells whether item i is the one that went.
 */
function firstMentions<T>(items: readonly T[], key: (item: T) => string) {
  const first = new Map<string, number>();
  items.forEach((item, i) => {
    if (!first.has(key(item))) first.set(key(item), i);
  });
  return {
    unique: [...first.values()].map((i) => items[i]!),
    isFirst: (item: T, i: number) => first.get(key(item)) === i,
  };
}

export interface EndedRun {
  id: string;
  status: RunEnd['status'];
  ended_at: Date;
  user_id: string;
}

export interface RunEnd {
  workspaceId: string;
  runId: string;
  status: 'COMPLETED' | 'FAILED';
  now: Date;
}

/**
 * Ends RUNNING runs (one statement and one commit for any number). Answers per end, in order:
 * null when there is no RUNNING run of that id in the workspace. A run named twice in its
 * workspace is ended by its first mention only; a mention in another workspace changes nothing.
 */
export async function endRuns(db: Queryable, ends: readonly RunEnd[]): Promise<(EndedRun | null)[]> {
  // Lowercase, as Postgres writes ids: an end that spelled its id otherwise still finds its answer.
  const key = (workspaceId: string, runId: string) => `${workspaceId}/${runId}`.toLowerCase();
  const { unique, isFirst } = firstMentions(ends, (end) => key(end.workspaceId, end.runId));
  // The runs are locked in id order, as insertSteps locks them: two statements that lock
  // several runs each in their own order could each hold one the other waits for.
  const { rows } = await db.query<EndedRun & { workspace_id: string }>(
    `WITH target AS (
       SELECT r.id, v.status, v.ended_at
       FROM (SELECT * FROM json_to_recordset($1::json) AS v(id uuid, workspace_id uuid, status text, ended_at timestamptz) LIMIT $2) v
       JOIN runs r ON r.id = v.id AND r.workspace_id = v.workspace_id AND r.status = 'RUNNING'
       ORDER BY r.id
       FOR NO KEY UPDATE OF r
     )
     UPDATE runs r SET status = t.status, ended_at = t.ended_at FROM target t
     WHERE r.id = t.id
     RETURNING r.id, r.workspace_id, r.status, r.ended_at, r.user_id`,
    [
      JSON.stringify(
        unique.map((end) => ({ id: end.runId, workspace_id: end.workspaceId, status: end.status, ended_at: end.now })),
      ),
      unique.length,
    ],
  );
  const byKey = new Map(rows.map(({ workspace_id: workspaceId, ...ended }) => [key(workspaceId, ended.id), ended]));
  return ends.map((end, i) => (isFirst(end, i) ? (byKey.get(key(end.workspaceId, end.runId)) ?? null) : null));
}

/** The run's status; null when the workspace has no such run. */
export async function runStatus(db: Queryable, workspaceId: string, runId: string): Promise<RunStatus | null> {
  const { rows } = await db.query<{ status: RunStatus }>(
    'SELECT status FROM runs WHERE id = $1 AND workspace_id = $2',
    [runId, workspaceId],
  );
  return rows[0]?.status ?? null;
}

export async function runExists(db: Queryable, workspaceId: string, runId: string): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM runs WHERE id = $1 AND workspace_id = $2', [runId, workspaceId]);
  return rows.length > 0;
}

export interface NewStep {
  id: string;
  runId: string;
  workspaceId: string;
  sequence: number;
  type: StepType;
  status: 'ALLOWED' | 'BLOCKED';
  model: string | null;
  toolName: string | null;
  inputData: unknown;
  decision: Decision;
  now: Date;
  /** The upper bound of the step's cost in microdollars (migration 15); null or absent: none known. */
  estimateMicros?: number | null;
  /**
   * The daemon instance that forwards the call and records its result (a proxied call); null: the
   * step's client records it. A dead instance's unfinished steps are recovered (result-recovery.ts).
   */
  daemonId?: number | null;
  /** A tool call through the MCP proxy: its server and JSON-RPC request id (migration 20). */
  mcp?: { server: string; request_id: string | number | null } | null;
}

const STEP_INSERT_COLUMNS =
  'id, run_id, workspace_id, sequence, type, status, model, tool_name, input_json, decision, created_at, estimate_micros, daemon_id, mcp';
/** A batch of steps as rows: the JSON document (each step as `stepRecord` writes it) and its length, by parameter number. */
const stepRecordset = (document: number, length: number) => `SELECT * FROM json_to_recordset($${document}::json)
  AS v(id uuid, run_id uuid, workspace_id uuid, sequence int, type text, status text, model text, tool_name text,
    input_json json, decision json, created_at timestamptz, estimate_micros bigint, daemon_id integer, mcp json) LIMIT $${length}`;
const stepRecord = (step: NewStep) => ({
  id: step.id,
  run_id: step.runId,
  workspace_id: step.workspaceId,
  sequence: step.sequence,
  type: step.type,
  status: step.status,
  model: step.model?.toWellFormed() ?? null,
  tool_name: step.toolName?.toWellFormed() ?? null,
  input_json: step.inputData ?? null,
  decision: step.decision,
  created_at: step.now,
  estimate_micros: step.estimateMicros ?? null,
  daemon_id: step.daemonId ?? null,
  mcp: step.mcp ?? null,
});

/**
 * How many distinct models a run keeps for the run list: enough for any agent we know of, and a
 * bound on what a client naming a new model in every step can make each step's update rewrite.
 */
export const RUN_MODELS_KEPT = 16;

/**
 * The run's kept `models` (SQL, a text[]) with the batch's `named` ones (in sequence order) that
 * it lacks appended in first-use order, up to RUN_MODELS_KEPT. NULL (a run from before
 * migration 18) stays NULL. The common step, a model the run already named, is one containment test.
 */
const modelsAdded = (kept: string, named: string) => `CASE WHEN ${kept} IS NULL OR ${named} <@ ${kept} THEN ${kept}
         ELSE (${kept} || ARRAY(
           SELECT model FROM unnest(${named}) WITH ORDINALITY n(model, position)
           WHERE model <> ALL (${kept}) GROUP BY model ORDER BY min(position)))[1:${RUN_MODELS_KEPT}] END`;

/** Why a step was not written: its run is no longer RUNNING, or its sequence is taken. */
export type StepInsertOutcome = 'inserted' | 'run_not_running' | 'duplicate_sequence';

/**
 * Records steps (one statement for any number), each in a run that is RUNNING when it commits,
 * and adds them to their runs' step counts. The run row is locked until the commit, so an end of
 * the run waits for the steps (and then sees them), and so does any other write of steps into the
 * same run: a daemon's batches go one at a time anyway, but steps created with an idempotency key
 * (each in its own transaction, as the SDK sends them) in one run queue one commit each. Runs are
 * locked in id order, as endRuns locks them. Answers per step, in order.
 */
export async function insertSteps(db: Queryable, steps: readonly NewStep[]): Promise<StepInsertOutcome[]> {
  // The batch travels as one JSON document: one native stringify, where eleven array parameters
  // cost pg an escaped array literal each. `decision` is json, not jsonb: its keys keep their order.
  // Text is made well-formed first: Postgres refuses a lone surrogate's JSON escape (a model name
  // cut inside an emoji), where a text parameter's UTF-8 stored it as U+FFFD.
  // The LIMIT (the batch's length) tells the planner how many rows the document holds: it takes
  // any json_to_recordset for 100, and planned for 100, it hashed every RUNNING run against the
  // batch rather than looking each step's run up by its key. finishSteps does the same.
  // Only the steps written are counted (not those whose sequence was taken). A run from before
  // migration 6 has no count (NULL stays NULL) and is summed from its steps when read.
  // The statement also answers which of the batch's runs were RUNNING (and locked) as it wrote:
  // a step not written in one of them lost its sequence, any other found no RUNNING run of that
  // id in its workspace. So the outcomes are the commit's own: no later read that could fail
  // after the steps committed, or see a run that ended since.
  const { rows } = await db.query<{ step_id: string | null; run_id: string | null; workspace_id: string | null }>(
    `WITH v AS (${stepRecordset(1, 2)}
     ), run AS (
       SELECT r.id, r.workspace_id FROM runs r
       WHERE (r.id, r.workspace_id) IN (SELECT run_id, workspace_id FROM v) AND r.status = 'RUNNING'
       ORDER BY r.id
       FOR NO KEY UPDATE OF r
     ), step AS (
       INSERT INTO steps (${STEP_INSERT_COLUMNS})
       SELECT v.id, r.id, r.workspace_id, v.sequence, v.type, v.status, v.model, v.tool_name, v.input_json, v.decision, v.created_at,
         v.estimate_micros, v.daemon_id, v.mcp
       FROM v JOIN run r ON r.id = v.run_id AND r.workspace_id = v.workspace_id
       ORDER BY r.id, v.sequence
       ON CONFLICT (run_id, sequence) DO NOTHING
       RETURNING id, run_id, model, sequence
     ), counted AS (
       UPDATE runs r SET step_count = r.step_count + c.steps, models = ${modelsAdded('r.models', 'c.models')}
       FROM (
         SELECT run_id, count(*) AS steps,
           coalesce(array_agg(model ORDER BY sequence) FILTER (WHERE model IS NOT NULL), '{}') AS models
         FROM step GROUP BY run_id
       ) c
       WHERE r.id = c.run_id AND r.step_count IS NOT NULL
     )
     SELECT id AS step_id, NULL::uuid AS run_id, NULL::uuid AS workspace_id FROM step
     UNION ALL
     SELECT NULL, id, workspace_id FROM run WHERE (SELECT count(*) FROM step) < $2`,
    [JSON.stringify(steps.map(stepRecord)), steps.length],
  );
  // Lowercase, as Postgres writes ids: a step that spelled its ids otherwise still finds its run.
  const runKey = (workspaceId: string, runId: string) => `${workspaceId}/${runId}`.toLowerCase();
  const inserted = new Set<string>();
  const runningRuns = new Set<string>();
  for (const row of rows) {
    if (row.step_id !== null) inserted.add(row.step_id.toLowerCase());
    else runningRuns.add(runKey(row.workspace_id!, row.run_id!));
  }
  return steps.map((step) =>
    inserted.has(step.id.toLowerCase())
      ? 'inserted'
      : runningRuns.has(runKey(step.workspaceId, step.runId))
        ? 'duplicate_sequence'
        : 'run_not_running',
  );
}

/** What a step check of a run with limits reads, under the run's row lock. */
export interface RunUsage {
  status: string;
  allowedSteps: number;
  lastCallHash: string | null;
  identicalCalls: number;
  /** The run's recorded cost (its finished steps'), rounded half-up to microdollars. */
  costMicros: number;
  /** Reserve mode: the estimates of its steps still in flight (ALLOWED); 0 when not read. */
  reservedMicros: number;
}

/**
 * Locks a run's row until the transaction ends and reads its usage: every step check of the run,
 * in any daemon, waits for the one before to commit, so each counts the steps allowed before it.
 * (The lock is the one insertSteps takes: a step written into the run waits as well.) Null when
 * the workspace has no such run. A row locked after a wait is read as that commit left it.
 */
export async function lockRunUsage(
  tx: Queryable,
  workspaceId: string,
  runId: string,
  options: { reservations: boolean } = { reservations: false },
): Promise<RunUsage | null> {
  // The cost is read in the same statement, from its snapshot: a result committed while the lock
  // was awaited is not in it (results do not take the run's lock: their totals are a row apart).
  const { rows } = await tx.query<{
    status: string;
    allowed_steps: number | null;
    last_call_hash: string | null;
    identical_calls: number | null;
    cost_micros: string | number | null;
    reserved_micros: string | number | null;
  }>(
    // The run's steps in flight are read through steps_outstanding_estimates (a late index). Every
    // step of a run with limits is written under this lock, so none is missed; a result finishing
    // one meanwhile may move its cost from one sum to the other, or not yet.
    `SELECT r.status, r.allowed_steps, r.last_call_hash, r.identical_calls,
       (SELECT round(t.total_cost_usd * 1000000) FROM run_totals t WHERE t.run_id = r.id) AS cost_micros,
       CASE WHEN $3 THEN (SELECT sum(s.estimate_micros) FROM steps s
         WHERE s.workspace_id = r.workspace_id AND s.run_id = r.id AND s.status = 'ALLOWED'
           AND s.estimate_micros IS NOT NULL) END AS reserved_micros
     FROM runs r WHERE r.id = $1 AND r.workspace_id = $2 FOR NO KEY UPDATE OF r`,
    [runId, workspaceId, options.reservations],
  );
  const run = rows[0];
  if (!run) return null;
  return {
    status: run.status,
    allowedSteps: Number(run.allowed_steps ?? 0),
    lastCallHash: run.last_call_hash,
    identicalCalls: Number(run.identical_calls ?? 0),
    costMicros: Math.min(Number(run.cost_micros ?? 0), SPEND_CAP_MICROS),
    reservedMicros: Math.min(Number(run.reserved_micros ?? 0), SPEND_CAP_MICROS),
  };
}

/** A step of a run with limits was allowed and written: its usage counts it (under the row lock). */
export async function countAllowedStep(
  tx: Queryable,
  runId: string,
  call: { hash: string | null; identicalCalls: number },
): Promise<void> {
  await tx.query(
    `UPDATE runs SET allowed_steps = coalesce(allowed_steps, 0) + 1, last_call_hash = $2, identical_calls = $3
     WHERE id = $1`,
    [runId, call.hash, call.identicalCalls],
  );
}

/** The highest sequence used in a run so far (0: none). */
export async function maxSequence(db: Queryable, runId: string): Promise<number> {
  const { rows } = await db.query<{ max: number | null }>('SELECT max(sequence) AS max FROM steps WHERE run_id = $1', [
    runId,
  ]);
  return Number(rows[0]?.max ?? 0);
}

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

/**
 * Finishes ALLOWED steps (one statement for any number): stores each result, prices it from the
 * model's active pricing entry in exact NUMERIC arithmetic, and adds the tokens and costs to their
 * runs' totals and the costs to the day's spend. Answers per step, in order: null when
 * there is no ALLOWED step of that id in the run. A step named twice is finished by its first
 * mention only.
 */
export async function finishSteps(db: Queryable, finishes: readonly StepFinish[]): Promise<(FinishedStep | null)[]> {
  // Keyed as the statement matches a step: a mention under another workspace or run must not take
  // the step's own finish.
  const key = (workspaceId: string, runId: string, stepId: string) => `${workspaceId}/${runId}/${stepId}`.toLowerCase();
  const { unique, isFirst } = firstMentions(finishes, (finish) => key(finish.workspaceId, finish.runId, finish.stepId));
  // The daily upserts add each workspace's and user's costs once, and return the day's totals
  // read under their row locks: what a counter copy needs. Rows are locked in one order
  // everywhere (workspaces, then users, each sorted), so concurrent writers cannot deadlock.
  // The LIMIT, as in insertSteps: planned for 100 finishes, a steps table of tens of thousands of
  // rows was read in full on every batch, instead of each step by its key.
  const { rows } = await db.query<{
    id: string;
    run_id: string;
    workspace_id: string;
    status: StepResult['status'];
    cost_micros: string | number | null;
    user_id: string;
    workspace_total: string | number | null;
    user_total: string | number | null;
  }>(
    `WITH v AS (
       SELECT * FROM json_to_recordset($1::json)
         AS v(workspace_id uuid, run_id uuid, step_id uuid, status text, duration_ms bigint, prompt_tokens bigint,
           completion_tokens bigint, cache_read_tokens bigint, cache_write_tokens bigint, reasoning_tokens bigint,
           output_json json, finished_at timestamptz, day date, model text, tool_not_reached boolean)
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
       RETURNING s.id, s.run_id, s.workspace_id, s.status, v.day, s.cost_usd,
         coalesce(s.prompt_tokens, 0) + coalesce(s.completion_tokens, 0) AS tokens,
         CASE WHEN s.cost_usd IS NOT NULL THEN least(round(s.cost_usd * 1000000), ${SPEND_CAP_MICROS}) END AS cost_micros
     ), priced AS (
       SELECT step.*, r.user_id, r.step_count FROM step JOIN runs r ON r.id = step.run_id
     ), run_total AS (
       INSERT INTO run_totals AS t (run_id, total_tokens, total_cost_usd)
       SELECT run_id, sum(tokens), coalesce(sum(cost_usd), 0) FROM priced WHERE step_count IS NOT NULL
       GROUP BY run_id HAVING sum(tokens) <> 0 OR sum(cost_usd) <> 0 ORDER BY run_id
       ON CONFLICT (run_id) DO UPDATE SET total_tokens = t.total_tokens + EXCLUDED.total_tokens,
         total_cost_usd = t.total_cost_usd + EXCLUDED.total_cost_usd
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
     )
     SELECT p.id, p.run_id, p.workspace_id, p.status, p.cost_micros, p.user_id, w.spend_micros AS workspace_total, u.spend_micros AS user_total
     FROM priced p
     LEFT JOIN workspace_day w ON w.workspace_id = p.workspace_id AND w.day = p.day
     LEFT JOIN user_day u ON u.workspace_id = p.workspace_id AND u.user_id = p.user_id AND u.day = p.day`,
    // One JSON document for the batch, as in insertSteps.
    [
      JSON.stringify(
        unique.map((finish) => ({
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
        })),
      ),
      unique.length,
    ],
  );
  const byKey = new Map(rows.map((row) => [key(row.workspace_id, row.run_id, row.id), row]));
  return finishes.map((finish, i) => {
    const step = isFirst(finish, i) ? byKey.get(key(finish.workspaceId, finish.runId, finish.stepId)) : undefined;
    if (!step) return null;
    const costMicros = Number(step.cost_micros ?? 0);
    if (costMicros === 0)
      return { id: step.id, status: step.status, user_id: step.user_id, cost_micros: 0, totals: null };
    const totals = {
      workspaceDailySpendMicros: Number(step.workspace_total),
      userDailySpendMicros: Number(step.user_total),
    };
    return { id: step.id, status: step.status, user_id: step.user_id, cost_micros: costMicros, totals };
  });
}

export async function stepExists(db: Queryable, workspaceId: string, runId: string, stepId: string): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM steps WHERE id = $1 AND run_id = $2 AND workspace_id = $3', [
    stepId,
    runId,
    workspaceId,
  ]);
  return rows.length > 0;
}

// --- Reads ---------------------------------------------------------------------------------

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
    models: row.models as string[],
  };
}

/** Steps `s` summed as a run's totals: what a run from before migration 6, which keeps none, reads. */
const STEP_SUMS = `count(*) AS step_count,
  coalesce(sum(coalesce(s.prompt_tokens, 0) + coalesce(s.completion_tokens, 0)), 0) AS total_tokens,
  coalesce(sum(s.cost_usd), 0) AS total_cost_usd`;

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
  const timeBound = Boolean(query.startedFrom || query.startedBefore || query.apiKeyId);
  const filter = where.join(' AND ');
  const [{ rows }, { rows: countRows }] = await Promise.all([
    // Only the page's runs from before migration 6 are summed. Not RUN_TOTALS's lateral sum: the
    // planner costs it for every listed run, skipped or not, and past jit_above_cost a page of
    // runs of 20,000 steps spent ~10 ms compiling a plan that runs in well under one.
    db.query(
      `WITH page AS (
         SELECT id, user_id, status, started_at, ended_at, step_count, models FROM runs WHERE ${filter}
         ORDER BY started_at DESC, id DESC LIMIT $${params.length + 1} OFFSET $${params.length + 2}
       ), summed AS (
         SELECT s.run_id, ${STEP_SUMS}
         FROM steps s WHERE s.run_id IN (SELECT id FROM page WHERE step_count IS NULL) GROUP BY s.run_id
       )
       SELECT r.id, r.user_id, r.status, r.started_at, r.ended_at, ${totalsOf('l')}, r.models
       FROM page r LEFT JOIN run_totals rt ON rt.run_id = r.id LEFT JOIN summed l ON l.run_id = r.id
       ORDER BY r.started_at DESC, r.id DESC`,
      [...params, query.perPage, (query.page - 1) * query.perPage],
    ),
    // Without a user, the counts Postgres keeps (migration 8): a few rows, however many runs. A
    // user's runs, or a time range's, are counted through the listing indexes.
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
