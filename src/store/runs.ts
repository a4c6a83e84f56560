/**
 * Run and step records as they are written: runs started and ended, steps inserted. A step's result
 * is step-finish.ts, a run's usage under its lock run-usage.ts, the list of runs run-list.ts.
 */
import type { Decision } from '../rules/engine.js';
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
  /** Its tags, bounded at the API; absent: none. */
  tags?: Record<string, string>;
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
           denied_steps integer, last_denial text, daemon_id integer, max_steps integer, max_cost_micros bigint,
           max_identical_calls integer, allowed_steps integer, last_call_hash text, identical_calls integer, api_key_id uuid,
           tags jsonb)
       LIMIT $2
     ), run AS (
       INSERT INTO runs (id, workspace_id, user_id, status, metadata, decision, started_at, ended_at, step_count, models,
         denied_steps, last_denial, daemon_id, max_steps, max_cost_micros, max_identical_calls, allowed_steps,
         last_call_hash, identical_calls, api_key_id, tags)
       SELECT id, workspace_id, user_id, status, metadata, decision, started_at, ended_at, step_count, models,
         denied_steps, last_denial, daemon_id, max_steps, max_cost_micros, max_identical_calls, allowed_steps,
         last_call_hash, identical_calls, api_key_id, tags FROM v
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
          denied_steps: run.firstStep?.status === 'BLOCKED' ? 1 : 0,
          last_denial: run.firstStep?.status === 'BLOCKED' ? run.firstStep.decision.reason : null,
          daemon_id: run.daemonId ?? null,
          api_key_id: run.apiKeyId ?? null,
          tags: run.tags ?? {},
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
 * is answered null). `keys[i]` is item i's key, made once; `isFirst(i)` tells whether item i is
 * the one that went.
 */
export function firstMentions<T>(items: readonly T[], key: (item: T) => string) {
  const keys = items.map(key);
  const first = new Map<string, number>();
  keys.forEach((itemKey, i) => {
    if (!first.has(itemKey)) first.set(itemKey, i);
  });
  return {
    unique: first.size === items.length ? items : [...first.values()].map((i) => items[i]!),
    keys,
    isFirst: (i: number) => first.get(keys[i]!) === i,
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
  const { unique, keys, isFirst } = firstMentions(ends, (end) => key(end.workspaceId, end.runId));
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
  return ends.map((_end, i) => (isFirst(i) ? (byKey.get(keys[i]!) ?? null) : null));
}

/**
 * The run's status; null when the workspace has no such run, or when `startedBy` (an API key's
 * id) is given and that key did not start it.
 */
export async function runStatus(
  db: Queryable,
  workspaceId: string,
  runId: string,
  startedBy: string | null = null,
): Promise<RunStatus | null> {
  const { rows } = await db.query<{ status: RunStatus }>(
    'SELECT status FROM runs WHERE id = $1 AND workspace_id = $2 AND ($3::uuid IS NULL OR api_key_id = $3::uuid)',
    [runId, workspaceId, startedBy],
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
  /** The API key whose credential made the step (migration 26): its spend counts against the key. */
  apiKeyId?: string | null;
}

const STEP_INSERT_COLUMNS =
  'id, run_id, workspace_id, sequence, type, status, model, tool_name, input_json, decision, created_at, estimate_micros, daemon_id, mcp, api_key_id';
/** A batch of steps as rows: the JSON document (each step as `stepRecord` writes it) and its length, by parameter number. */
const stepRecordset = (document: number, length: number) => `SELECT * FROM json_to_recordset($${document}::json)
  AS v(id uuid, run_id uuid, workspace_id uuid, sequence int, type text, status text, model text, tool_name text,
    input_json json, decision json, created_at timestamptz, estimate_micros bigint, daemon_id integer, mcp json,
    api_key_id uuid) LIMIT $${length}`;
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
  api_key_id: step.apiKeyId ?? null,
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
  // Only the steps written are counted (not those whose sequence was taken), and the denied ones
  // with the reason of the last (migration 26). A run from before migration 6 has no count (NULL
  // stays NULL) and is summed from its steps when read.
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
         v.estimate_micros, v.daemon_id, v.mcp, v.api_key_id
       FROM v JOIN run r ON r.id = v.run_id AND r.workspace_id = v.workspace_id
       ORDER BY r.id, v.sequence
       ON CONFLICT (run_id, sequence) DO NOTHING
       RETURNING id, run_id, model, sequence, status, decision->>'reason' AS reason
     ), counted AS (
       UPDATE runs r SET step_count = r.step_count + c.steps, models = ${modelsAdded('r.models', 'c.models')},
         denied_steps = r.denied_steps + c.denied, last_denial = coalesce(c.last_denial, r.last_denial)
       FROM (
         SELECT run_id, count(*) AS steps,
           coalesce(array_agg(model ORDER BY sequence) FILTER (WHERE model IS NOT NULL), '{}') AS models,
           count(*) FILTER (WHERE status = 'BLOCKED') AS denied,
           (array_agg(reason ORDER BY sequence DESC) FILTER (WHERE status = 'BLOCKED'))[1] AS last_denial
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

/** The highest sequence used in a run so far (0: none). */
export async function maxSequence(db: Queryable, runId: string): Promise<number> {
  const { rows } = await db.query<{ max: number | null }>('SELECT max(sequence) AS max FROM steps WHERE run_id = $1', [
    runId,
  ]);
  return Number(rows[0]?.max ?? 0);
}

export async function stepExists(db: Queryable, workspaceId: string, runId: string, stepId: string): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM steps WHERE id = $1 AND run_id = $2 AND workspace_id = $3', [
    stepId,
    runId,
    workspaceId,
  ]);
  return rows.length > 0;
}
