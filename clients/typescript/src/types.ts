/**
 * Wire types of the runguard API as the client sees them, plus the client's own option types.
 *
 * Resource fields keep the API's snake_case so that a logged response reads the same as the
 * server's documentation; options passed to the client are camelCase like the rest of a TS codebase.
 */

import type * as Wire from './shared/wire.js';

// Wire types are the daemon's contract (src/contract/), written out as plain types by
// `npm run clients:generate`: the package needs neither the server nor a schema library.

/** A JSON object, as accepted for `metadata` and `input_data`. */
export type JsonObject = Wire.JsonObject;

/** Lifecycle of a run. */
export type RunStatus = Wire.RunStatus;
/** Lifecycle of a step. A denied step is stored with status `BLOCKED` as an audit record. */
export type StepStatus = Wire.StepStatus;
/** Kinds of step the service records. */
export type StepType = Wire.StepType;
/** Final status a client reports for a run or a step. */
export type FinalStatus = Wire.EndStatus;
/** Outcome of a guardrail evaluation. */
export type DecisionOutcome = Wire.DecisionOutcome;
/**
 * Why a guardrail denied a run start or a step, in rule priority order.
 * `MONTHLY_RUN_LIMIT_EXCEEDED` and `MAX_CONCURRENT_RUNS_EXCEEDED` only happen at run start.
 */
export type DenyReason = Wire.DenyReason;
/** Keys of `Decision.evaluated_rules`, in evaluation order. */
export type RuleKey = Wire.RuleKey;
/** Result of one evaluated rule. */
export type RuleResult = Wire.RuleResult;

/** A guardrail decision. */
export type Decision = Omit<Wire.Decision, 'evaluated_rules'> & {
  /**
   * Rules actually evaluated, in order. The daemon sends it in create answers and in run detail;
   * optional so that a client tolerates a server that leaves it out.
   */
  evaluated_rules?: Wire.Decision['evaluated_rules'];
};

/**
 * The numbers that explain a denial. Budgets: `spend_usd`, `budget_usd`, `reserved_usd` (calls in
 * flight, reserve mode) and `resets_at`; the monthly limit: `runs`, `limit`, `resets_at`;
 * concurrency: `running`, `limit`. Absent on an ALLOW, and from a daemon that predates it.
 */
export type DenialDetail = NonNullable<Wire.Decision['detail']>;

/** Answers carry the client's `Decision`, whose `evaluated_rules` may be missing. */
type WithDecision<T> = Omit<T, 'decision'> & { decision: Decision };

/** Body of `POST /v1/runs/`. */
export type RunCreateParams = Wire.RunCreateBody;
/** Answer of `POST /v1/runs/` (always 201, also when denied). */
export type RunCreated = WithDecision<Wire.RunCreated>;
/** Body of `POST /v1/runs/{run_id}/end`. */
export type RunEndParams = Wire.RunEndBody;
/** Answer of `POST /v1/runs/{run_id}/end`; `ended_at` is an ISO 8601 UTC timestamp. */
export type RunEnded = Wire.RunEnded;
/** Body of `POST /v1/runs/{run_id}/steps`. */
export type StepCreateParams = Wire.StepCreateBody;
/** Answer of `POST /v1/runs/{run_id}/steps` (always 201, also when denied). */
export type StepCreated = WithDecision<Wire.StepCreated>;
/** Body of `PATCH /v1/runs/{run_id}/steps/{step_id}`. */
export type StepUpdateParams = Wire.StepUpdateBody;
/** Answer of `PATCH /v1/runs/{run_id}/steps/{step_id}`. */
export type StepUpdated = Wire.StepUpdated;
/** A step as returned in run detail; `cost_usd` is `null` when no pricing entry exists for the model. */
export type Step = WithDecision<Wire.Step>;
/** A run as returned by `GET /v1/runs/{run_id}`. */
export type Run = Omit<WithDecision<Wire.RunDetail>, 'steps'> & { steps: Step[] };
/** One item of `GET /v1/runs/`. */
export type RunSummary = Wire.RunSummary;
/** One entry of a 422 answer's `errors`. */
export type ValidationIssue = Wire.ValidationIssue;
/** Error body of every non-2xx answer. */
export type ErrorBody = Wire.ErrorBody;

/** `[promptTokens, completionTokens]` as read from a provider response. */
export type TokenCounts = readonly [promptTokens: number, completionTokens: number];

/** A call's token counts, as the bundled extractors read them. */
export interface TokenUsage {
  /** Every input token, cached ones included (OpenAI's `prompt_tokens` meaning). */
  promptTokens: number;
  /** Every output token, reasoning included. */
  completionTokens: number;
  /** Part of `promptTokens` read from the prompt cache (priced at the cache-read price). */
  cacheReadTokens?: number | null;
  /** Part of `promptTokens` written to the prompt cache (priced at the cache-write price). */
  cacheWriteTokens?: number | null;
  /** Part of `completionTokens` spent reasoning: recorded, priced as output. */
  reasoningTokens?: number | null;
}

/** Folds the chunks (or events) of one streamed answer into its usage. */
export interface StreamUsageReader {
  /** Sees each chunk as it passes; never changes it. */
  onChunk(chunk: unknown): void;
  /** The usage seen so far; undefined while none. */
  usage(): TokenCounts | TokenUsage | undefined;
}

/**
 * Reads token counts from the value a model call resolved to: `[prompt, completion]`, or a
 * {@link TokenUsage} with the cache and reasoning parts. Returning nothing (or throwing) records
 * the step without token counts. When the call returns a stream, `streamReader` (the bundled
 * extractors have one) folds its chunks; an extractor without one is called with each chunk and
 * its last answer counts.
 */
export type TokenExtractor<T = unknown> = ((result: T) => TokenCounts | TokenUsage | null | undefined) & {
  streamReader?: () => StreamUsageReader;
};

/** A function guarded as a step: sync or async. */
export type StepFn<T> = () => T | PromiseLike<T>;

/** Options of {@link GuardClient}. */
export interface ClientOptions {
  /**
   * Workspace API key, `lg_<prefix>_<secret>`; checked when the client is built. Accepts
   * `undefined` so that `apiKey: process.env.X` compiles under `strict`.
   * @default process.env.RUNGUARD_API_KEY (none set: `GuardConfigError` at construction)
   */
  apiKey?: string | undefined;
  /**
   * Address of the runguard daemon.
   * @default process.env.RUNGUARD_URL, else 'http://127.0.0.1:8787'
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
  /**
   * The run's own limits (docs/limits.md): each may tighten the workspace's default, never loosen
   * it (a looser one is clamped to the default). A step past one is denied, and `modelCall` or
   * `toolCall` throws `GuardBlockedError` with the reason and its numbers.
   */
  limits?: RunLimitOptions;
  /**
   * Tags the run carries (`{ project: 'search', team: 'growth' }`): what runs are listed, reported
   * and budgeted by. At most 16; a key is 1 to 64 of `a-z 0-9 _ . -`, a value 1 to 128 characters;
   * over a bound the start fails with a 422 `APIError` naming the tag.
   */
  tags?: Record<string, string>;
}

/** A run's own limits; absent or null: the workspace's default applies. */
export interface RunLimitOptions {
  /** Steps the run may be allowed (RUN_STEP_LIMIT_EXCEEDED); denied steps do not count. */
  maxSteps?: number | null;
  /** USD the run may cost (RUN_BUDGET_EXCEEDED once its recorded cost reaches it). */
  maxCostUsd?: number | null;
  /** Identical calls in a row the run may make (REPEATED_CALL_LOOP). */
  maxIdenticalCalls?: number | null;
}

/** The limits that apply to a run, as its start answered them (null: none). */
export type RunLimits = Wire.RunLimits;

/** Options of a model call step. */
export interface ModelCallOptions<T = unknown> {
  /** Model identifier; must equal the model of a pricing entry for cost to be computed. */
  model: string;
  /** Audit payload stored with the step. */
  inputData?: JsonObject | null;
  /**
   * Reads the token counts from the result, or from the chunks of a stream the call returns;
   * see `extractors`.
   */
  tokenExtractor?: TokenExtractor<T>;
  /**
   * The most this call may cost, in USD (the step's `max_cost_usd`). With the workspace's
   * `budget_mode: "reserve"`, it is what the call reserves against the budgets before it runs;
   * absent, the workspace's `default_step_reservation_usd` is reserved.
   * @default undefined
   */
  maxCostUsd?: number;
}

/** Options of a tool call step. */
export interface ToolCallOptions {
  /** Name of the tool being called. */
  toolName: string;
  /** Audit payload stored with the step. */
  inputData?: JsonObject | null;
}
