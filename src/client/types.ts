/**
 * Wire types of the runguard API as the client sees them, plus the client's own option types.
 *
 * Resource fields keep the API's snake_case so that a logged response reads the same as the
 * server's documentation; options passed to the client are camelCase like the rest of a TS codebase.
 */

/** A JSON object, as accepted for `metadata` and `input_data`. */
export type JsonObject = { [key: string]: unknown };

/** Lifecycle of a run. */
export type RunStatus = 'RUNNING' | 'COMPLETED' | 'FAILED' | 'BLOCKED';

/** Lifecycle of a step. A denied step is stored with status `BLOCKED` as an audit record. */
export type StepStatus = 'ALLOWED' | 'COMPLETED' | 'FAILED' | 'BLOCKED';

/** Kinds of step the service records. */
export type StepType = 'INPUT' | 'MODEL_CALL' | 'TOOL_CALL' | 'OUTPUT' | 'REASONING' | 'SYSTEM';

/** Final status a client reports for a run or a step. */
export type FinalStatus = 'COMPLETED' | 'FAILED';

/** Outcome of a guardrail evaluation. */
export type DecisionOutcome = 'ALLOW' | 'DENY';

/**
 * Why a guardrail denied a run start or a step, in rule priority order.
 * `MONTHLY_RUN_LIMIT_EXCEEDED` and `MAX_CONCURRENT_RUNS_EXCEEDED` only happen at run start.
 */
export type DenyReason =
  | 'KILL_SWITCH_ACTIVE'
  | 'USER_BLOCKED'
  | 'WORKSPACE_DAILY_BUDGET_EXCEEDED'
  | 'USER_DAILY_BUDGET_EXCEEDED'
  | 'MONTHLY_RUN_LIMIT_EXCEEDED'
  | 'MAX_CONCURRENT_RUNS_EXCEEDED';

/** Keys of `Decision.evaluated_rules`, in evaluation order. */
export type RuleKey =
  | 'kill_switch'
  | 'user_blocked'
  | 'workspace_daily_budget'
  | 'user_daily_budget'
  | 'monthly_run_limit'
  | 'max_concurrent_runs';

/** Result of one evaluated rule. */
export type RuleResult = 'PASS' | 'DENY';

/** A guardrail decision. */
export interface Decision {
  outcome: DecisionOutcome;
  /** `null` when the outcome is `ALLOW`. */
  reason: DenyReason | null;
  /**
   * Rules actually evaluated, in order. The daemon sends it in create answers and in run detail;
   * optional so that a client tolerates a server that leaves it out.
   */
  evaluated_rules?: Partial<Record<RuleKey, RuleResult>>;
}

/** Body of `POST /v1/runs/`. */
export interface RunCreateParams {
  user_id: string;
  metadata?: JsonObject | null;
}

/** Answer of `POST /v1/runs/` (always 201, also when denied). */
export interface RunCreated {
  id: string;
  user_id: string;
  status: 'RUNNING' | 'BLOCKED';
  decision: Decision;
}

/** Body of `POST /v1/runs/{run_id}/end`. */
export interface RunEndParams {
  status: FinalStatus;
}

/** Answer of `POST /v1/runs/{run_id}/end`. */
export interface RunEnded {
  id: string;
  status: FinalStatus;
  /** ISO 8601 UTC timestamp. */
  ended_at: string;
}

/** Body of `POST /v1/runs/{run_id}/steps`. */
export interface StepCreateParams {
  type: StepType;
  /** 1-indexed position in the run, unique per run. */
  sequence: number;
  model?: string | null;
  tool_name?: string | null;
  input_data?: JsonObject | null;
}

/** Answer of `POST /v1/runs/{run_id}/steps` (always 201, also when denied). */
export interface StepCreated {
  id: string;
  run_id: string;
  sequence: number;
  status: 'ALLOWED' | 'BLOCKED';
  decision: Decision;
}

/** Body of `PATCH /v1/runs/{run_id}/steps/{step_id}`. */
export interface StepUpdateParams {
  status: FinalStatus;
  duration_ms?: number | null;
  prompt_tokens?: number | null;
  completion_tokens?: number | null;
}

/** Answer of `PATCH /v1/runs/{run_id}/steps/{step_id}`. */
export interface StepUpdated {
  id: string;
  status: FinalStatus;
}

/** A step as returned in run detail. */
export interface Step {
  id: string;
  type: StepType;
  status: StepStatus;
  sequence: number;
  model: string | null;
  tool_name: string | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  /** `null` when no pricing entry exists for the model. */
  cost_usd: number | null;
  duration_ms: number | null;
  input_data: JsonObject | null;
  output_data: JsonObject | null;
  decision: Decision;
  created_at: string;
}

/** A run as returned by `GET /v1/runs/{run_id}`. */
export interface Run {
  id: string;
  user_id: string;
  status: RunStatus;
  metadata: JsonObject | null;
  started_at: string;
  ended_at: string | null;
  total_tokens: number;
  total_cost_usd: number;
  duration_ms: number;
  steps: Step[];
}

/** One item of `GET /v1/runs/`. */
export interface RunSummary {
  id: string;
  user_id: string;
  status: RunStatus;
  started_at: string;
  ended_at: string | null;
  step_count: number;
  total_tokens: number;
  total_cost_usd: number;
}

/** One entry of a 422 answer's `errors`. */
export interface ValidationIssue {
  /** Where the problem is, e.g. `body.user_id`. */
  path: string;
  message: string;
}

/** Error body of every non-2xx answer. */
export interface ErrorBody {
  detail: string;
  code: string;
  errors?: ValidationIssue[];
}

/** `[promptTokens, completionTokens]` as read from a provider response. */
export type TokenCounts = readonly [promptTokens: number, completionTokens: number];

/**
 * Reads token counts from the value a model call resolved to.
 * Returning nothing (or throwing) records the step without token counts.
 */
export type TokenExtractor<T = unknown> = (result: T) => TokenCounts | null | undefined;

/** A function guarded as a step: sync or async. */
export type StepFn<T> = () => T | PromiseLike<T>;

/** Options of {@link GuardClient}. */
export interface ClientOptions {
  /**
   * Workspace API key, `lg_<prefix>_<secret>`. Required; checked when the client is built.
   * Typed to accept `undefined` so that `apiKey: process.env.RUNGUARD_API_KEY` compiles under
   * `strict`: an unset variable throws `GuardConfigError` at construction, not a type error.
   */
  apiKey: string | undefined;
  /**
   * Address of the runguard daemon.
   * @default 'http://127.0.0.1:8787'
   */
  baseUrl?: string;
  /**
   * Time allowed for one HTTP attempt (headers and body), in milliseconds.
   * @default 60000
   */
  timeoutMs?: number;
  /**
   * How many times a failed request is retried (connection errors, timeouts, 408, 429, 5xx).
   * @default 2
   */
  maxRetries?: number;
  /**
   * A `fetch` implementation to use instead of the global one (for proxies, tests, instrumentation).
   * @default globalThis.fetch
   */
  fetch?: typeof fetch;
}

/** Options of {@link GuardClient.run}. */
export interface RunOptions {
  /** Arbitrary caller data stored with the run. */
  metadata?: JsonObject | null;
}

/** Options of a model call step. */
export interface ModelCallOptions<T = unknown> {
  /** Model identifier; must equal the model of a pricing entry for cost to be computed. */
  model: string;
  /** Audit payload stored with the step. */
  inputData?: JsonObject | null;
  /** Reads `[promptTokens, completionTokens]` from the result; see `extractors`. */
  tokenExtractor?: TokenExtractor<T>;
}

/** Options of a tool call step. */
export interface ToolCallOptions {
  /** Name of the tool being called. */
  toolName: string;
  /** Audit payload stored with the step. */
  inputData?: JsonObject | null;
}
