/** Runs and steps on the wire: what `/v1/runs` takes and answers. */
import { Type, type Static } from './typebox.js';
import { Count, JsonObject, Nullable, Page, Timestamp, Usd, Uuid, UuidParam } from './common.js';
import { DecisionSchema, DenyReason } from './decision.js';
import { MAX_RUN_TAGS, TAG_KEY_PATTERN, TAG_VALUE_MAX_LENGTH, TAG_VALUE_PATTERN } from './tag-pairs.js';

export { MAX_RUN_TAGS, TAG_KEY_PATTERN, TAG_VALUE_MAX_LENGTH, TAG_VALUE_PATTERN };

export const RunStatus = Type.Enum(['RUNNING', 'COMPLETED', 'FAILED', 'BLOCKED']);
/** A denied step is stored with status `BLOCKED`, as an audit record. */
export const StepStatus = Type.Enum(['ALLOWED', 'COMPLETED', 'FAILED', 'BLOCKED']);
export const StepType = Type.Enum(['INPUT', 'MODEL_CALL', 'TOOL_CALL', 'OUTPUT', 'REASONING', 'SYSTEM']);
/** The status a client reports when it ends a run or finishes a step. */
export const EndStatus = Type.Enum(['COMPLETED', 'FAILED']);

export const UserId = Type.String({ minLength: 1, maxLength: 256 });
const Name = Type.String({ minLength: 1, maxLength: 256 });

export const RunParams = Type.Object({ run_id: UuidParam });
export const StepParams = Type.Object({ run_id: UuidParam, step_id: UuidParam });

/** A count limit of a run (rules run_step_limit, repeated_calls): at least 1. */
export const RunCountLimit = Type.Integer({ minimum: 1, maximum: 1_000_000_000 });

/**
 * What a run asks for at its start (`POST /v1/runs` `limits`): each may tighten the workspace's
 * default (`run_max_*`), never loosen it. Absent or null: the workspace's default applies.
 */
export const RunLimitsRequest = Type.Object(
  {
    max_steps: Type.Optional(Nullable(RunCountLimit)),
    max_cost_usd: Type.Optional(Nullable(Usd)),
    max_identical_calls: Type.Optional(Nullable(RunCountLimit)),
  },
  { additionalProperties: false },
);

/** The limits that apply to a run, fixed at its start: the tighter of its own and the workspace's; null = none. */
export const RunLimits = Type.Object({
  max_steps: Nullable(Type.Integer()),
  max_cost_usd: Nullable(Type.Number()),
  max_identical_calls: Nullable(Type.Integer()),
});

const TagValue = Type.String({ minLength: 1, maxLength: TAG_VALUE_MAX_LENGTH, pattern: TAG_VALUE_PATTERN });

/**
 * A run's tags (`{"project": "search"}`), fixed at its start: what runs are filtered, reported and
 * budgeted by. `{}` when none.
 */
export const RunTags = Type.Unsafe<{ [key: string]: string }>(
  Type.Object(
    {},
    {
      additionalProperties: TagValue,
      propertyNames: { pattern: TAG_KEY_PATTERN },
      maxProperties: MAX_RUN_TAGS,
      description: `At most ${MAX_RUN_TAGS} pairs; keys 1 to 64 of a-z 0-9 _ . -; values 1 to 128 characters, no control characters.`,
    },
  ),
);
export type RunTags = Static<typeof RunTags>;

/** Body of `POST /v1/runs`. */
export const RunCreateBody = Type.Object(
  {
    user_id: UserId,
    metadata: Type.Optional(Nullable(JsonObject)),
    limits: Type.Optional(RunLimitsRequest),
    tags: Type.Optional(RunTags),
  },
  { additionalProperties: false },
);
/** Answer of `POST /v1/runs`: always a 201, a denial too. */
export const RunCreated = Type.Object({
  id: Uuid,
  user_id: Type.String(),
  status: Type.Enum(['RUNNING', 'BLOCKED']),
  decision: DecisionSchema,
  /** The limits that apply to the run; present when it has any. */
  limits: Type.Optional(RunLimits),
  tags: RunTags,
});

/** Body of `POST /v1/runs/{run_id}/end`. */
export const RunEndBody = Type.Object({ status: EndStatus }, { additionalProperties: false });
export const RunEnded = Type.Object({ id: Uuid, status: EndStatus, ended_at: Timestamp });

/** Body of `POST /v1/runs/{run_id}/steps`. */
export const StepCreateBody = Type.Object(
  {
    type: StepType,
    /** 1-indexed position in the run, unique per run. */
    sequence: Type.Integer({ minimum: 1, maximum: 2_147_483_647 }),
    model: Type.Optional(Nullable(Name)),
    tool_name: Type.Optional(Nullable(Name)),
    input_data: Type.Optional(Nullable(JsonObject)),
    /**
     * The most this step may cost (USD). Stored as its estimate; in `budget_mode: "reserve"` it is
     * what the step reserves (absent: the workspace's `default_step_reservation_usd`, for a MODEL_CALL).
     */
    max_cost_usd: Type.Optional(Nullable(Usd)),
  },
  { additionalProperties: false },
);
/** Answer of `POST /v1/runs/{run_id}/steps`: always a 201, a denial too. */
export const StepCreated = Type.Object({
  id: Uuid,
  run_id: Uuid,
  sequence: Type.Integer(),
  status: Type.Enum(['ALLOWED', 'BLOCKED']),
  decision: DecisionSchema,
});

/** Body of `PATCH /v1/runs/{run_id}/steps/{step_id}`: token counts price the step. */
export const StepUpdateBody = Type.Object(
  {
    status: EndStatus,
    duration_ms: Type.Optional(Nullable(Count)),
    prompt_tokens: Type.Optional(Nullable(Count)),
    completion_tokens: Type.Optional(Nullable(Count)),
    /** Parts of prompt_tokens read from and written to the prompt cache; reasoning, a part of completion_tokens. */
    cache_read_tokens: Type.Optional(Nullable(Count)),
    cache_write_tokens: Type.Optional(Nullable(Count)),
    reasoning_tokens: Type.Optional(Nullable(Count)),
    /** The older name of `cache_read_tokens`. */
    cached_prompt_tokens: Type.Optional(Nullable(Count)),
    output_data: Type.Optional(Nullable(JsonObject)),
  },
  { additionalProperties: false },
);
export const StepUpdated = Type.Object({ id: Uuid, status: EndStatus });

/** A tag filter, `key:value`: split at the first `:` (keys have none). */
export const TAG_FILTER_PATTERN = `${TAG_KEY_PATTERN.slice(0, -1)}:${TAG_VALUE_PATTERN.slice(1, -2)}{1,${TAG_VALUE_MAX_LENGTH}}$`;

/** Query of `GET /v1/runs`. */
export const RunListQuery = Type.Object({
  status: Type.Optional(RunStatus),
  user_id: Type.Optional(UserId),
  started_from: Type.Optional(
    Type.String({ format: 'date-time', description: 'Runs started at or after this instant' }),
  ),
  started_before: Type.Optional(Type.String({ format: 'date-time', description: 'Runs started before this instant' })),
  tag: Type.Optional(
    Type.Array(Type.String({ pattern: TAG_FILTER_PATTERN }), {
      maxItems: MAX_RUN_TAGS,
      description: 'Runs carrying this tag, as key:value; repeated, runs carrying every one',
    }),
  ),
  page: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 1 }),
  per_page: Type.Integer({ minimum: 1, maximum: 100, default: 50 }),
});

/** What a run is, in its list and its detail. */
const RunFields = Type.Object({
  id: Uuid,
  user_id: Type.String(),
  status: RunStatus,
  started_at: Timestamp,
  ended_at: Nullable(Timestamp),
  step_count: Type.Integer(),
  total_tokens: Type.Integer(),
  total_cost_usd: Type.Number(),
  tags: RunTags,
});

/** One item of `GET /v1/runs`. */
export const RunSummary = Type.Object({
  ...RunFields.properties,
  models: Type.Array(Type.String(), {
    description:
      'The models its steps named, distinct, in first-use order (blocked steps included); at most the first 16.',
  }),
  unpriced_calls: Type.Integer({
    description:
      'Its model calls recorded with tokens and no price: their cost is unknown, counted as $0 in total_cost_usd and against budgets.',
  }),
  denied_steps: Type.Integer({ description: 'Its steps a guardrail denied (BLOCKED).' }),
  /** Why it was denied: a BLOCKED run's own reason, else its last denied step's; null when none was. */
  denial_reason: Nullable(DenyReason),
});
export const RunPage = Page(RunSummary);

/** A step as the run detail shows it. */
export const Step = Type.Object({
  id: Uuid,
  type: StepType,
  status: StepStatus,
  sequence: Type.Integer(),
  model: Nullable(Type.String()),
  tool_name: Nullable(Type.String()),
  /** A tool call through the MCP proxy (docs/mcp.md): its server and JSON-RPC request id; null otherwise. */
  mcp: Nullable(
    Type.Object({ server: Type.String(), request_id: Nullable(Type.Union([Type.String(), Type.Number()])) }),
  ),
  prompt_tokens: Nullable(Type.Integer()),
  completion_tokens: Nullable(Type.Integer()),
  cached_prompt_tokens: Nullable(Type.Integer({ description: 'Deprecated: the same as cache_read_tokens.' })),
  cache_read_tokens: Nullable(Type.Integer({ description: 'Part of prompt_tokens read from the prompt cache.' })),
  cache_write_tokens: Nullable(Type.Integer({ description: 'Part of prompt_tokens written to the prompt cache.' })),
  reasoning_tokens: Nullable(
    Type.Integer({ description: 'Part of completion_tokens spent reasoning (priced as output).' }),
  ),
  /** `null` when no pricing entry exists for the model. */
  cost_usd: Nullable(Type.Number()),
  duration_ms: Nullable(Type.Integer()),
  input_data: Nullable(JsonObject),
  output_data: Nullable(JsonObject),
  decision: DecisionSchema,
  created_at: Timestamp,
});

/** `GET /v1/runs/{run_id}`: a run with its steps, ordered by sequence. */
export const RunDetail = Type.Object({
  ...RunFields.properties,
  metadata: Nullable(JsonObject),
  decision: DecisionSchema,
  /** The limits that applied to the run (fixed at its start); null fields: none. */
  limits: RunLimits,
  duration_ms: Type.Integer(),
  steps: Type.Array(Step),
});

export type RunStatus = Static<typeof RunStatus>;
export type StepStatus = Static<typeof StepStatus>;
export type StepType = Static<typeof StepType>;
export type EndStatus = Static<typeof EndStatus>;
export type RunLimitsRequest = Static<typeof RunLimitsRequest>;
export type RunLimits = Static<typeof RunLimits>;
export type RunCreateBody = Static<typeof RunCreateBody>;
export type RunCreated = Static<typeof RunCreated>;
export type RunEndBody = Static<typeof RunEndBody>;
export type RunEnded = Static<typeof RunEnded>;
export type StepCreateBody = Static<typeof StepCreateBody>;
export type StepCreated = Static<typeof StepCreated>;
export type StepUpdateBody = Static<typeof StepUpdateBody>;
export type StepUpdated = Static<typeof StepUpdated>;
export type RunListQuery = Static<typeof RunListQuery>;
export type RunSummary = Static<typeof RunSummary>;
export type RunPage = Static<typeof RunPage>;
export type Step = Static<typeof Step>;
export type RunDetail = Static<typeof RunDetail>;
