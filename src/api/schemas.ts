/** Request and response schemas (TypeBox): they validate, serialize, and make the OpenAPI document. */
import { Type, type TSchema } from 'typebox';

export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

export const Uuid = Type.String({ format: 'uuid' });
/**
 * A UUID in a path: the 8-4-4-4-12 form in either case. A pattern, not ajv's `uuid` format, which
 * also takes a `urn:uuid:` prefix that Postgres refuses. Read it through `pathUuid`.
 */
export const UUID_PATTERN = '^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$';
export const UuidParam = Type.String({ pattern: UUID_PATTERN });
/**
 * One spelling for an id, lowercase as Postgres writes it: ids are compared as text once
 * Postgres has answered (a batch's answers, a run's next sequence), so an uppercase id would find
 * its own write unanswered.
 */
export const pathUuid = (value: string) => value.toLowerCase();
/** Big enough for any real count, small enough to stay exact in a JSON number and a bigint. */
export const Count = Type.Integer({ minimum: 0, maximum: 1_000_000_000_000 });
export const Usd = Type.Number({ minimum: 0, maximum: 1_000_000_000 });

export const ErrorBody = Type.Object({
  detail: Type.String(),
  code: Type.String(),
  errors: Type.Optional(Type.Array(Type.Object({ path: Type.String(), message: Type.String() }))),
});

export const errorResponses = (...statuses: number[]) =>
  Object.fromEntries(statuses.map((s) => [s, ErrorBody])) as Record<number, typeof ErrorBody>;

export const DenyReason = Type.Enum([
  'KILL_SWITCH_ACTIVE',
  'USER_BLOCKED',
  'WORKSPACE_DAILY_BUDGET_EXCEEDED',
  'USER_DAILY_BUDGET_EXCEEDED',
  'MONTHLY_RUN_LIMIT_EXCEEDED',
  'MAX_CONCURRENT_RUNS_EXCEEDED',
]);

export const DecisionSchema = Type.Object({
  outcome: Type.Enum(['ALLOW', 'DENY']),
  reason: Nullable(DenyReason),
  evaluated_rules: Type.Record(Type.String(), Type.Enum(['PASS', 'DENY'])),
});

export const RunStatus = Type.Enum(['RUNNING', 'COMPLETED', 'FAILED', 'BLOCKED']);
export const StepStatus = Type.Enum(['ALLOWED', 'COMPLETED', 'FAILED', 'BLOCKED']);
export const StepType = Type.Enum(['INPUT', 'MODEL_CALL', 'TOOL_CALL', 'OUTPUT', 'REASONING', 'SYSTEM']);
export const EndStatus = Type.Enum(['COMPLETED', 'FAILED']);

/**
 * The body of a write that takes no input: none, or `{}`. Anything else is a 422, as on every
 * write: a field the endpoint does not read (`workspace_id`, `name`) must not look accepted.
 */
export const NoBody = Nullable(Type.Object({}, { additionalProperties: false }));

/** Arbitrary caller data (metadata, audit payloads). */
export const JsonObject = Type.Object({}, { additionalProperties: true });

export const RunSummary = Type.Object({
  id: Uuid,
  user_id: Type.String(),
  status: RunStatus,
  started_at: Type.String({ format: 'date-time' }),
  ended_at: Nullable(Type.String({ format: 'date-time' })),
  step_count: Type.Integer(),
  total_tokens: Type.Integer(),
  total_cost_usd: Type.Number(),
});

export const Step = Type.Object({
  id: Uuid,
  type: StepType,
  status: StepStatus,
  sequence: Type.Integer(),
  model: Nullable(Type.String()),
  tool_name: Nullable(Type.String()),
  prompt_tokens: Nullable(Type.Integer()),
  completion_tokens: Nullable(Type.Integer()),
  cached_prompt_tokens: Nullable(Type.Integer()),
  cost_usd: Nullable(Type.Number()),
  duration_ms: Nullable(Type.Integer()),
  input_data: Nullable(JsonObject),
  output_data: Nullable(JsonObject),
  decision: DecisionSchema,
  created_at: Type.String({ format: 'date-time' }),
});

export const RunDetail = Type.Object({
  ...RunSummary.properties,
  metadata: Nullable(JsonObject),
  decision: DecisionSchema,
  duration_ms: Type.Integer(),
  steps: Type.Array(Step),
});

export const ModelPricing = Type.Object({
  id: Uuid,
  model: Type.String(),
  input_cost_per_token: Type.Number(),
  output_cost_per_token: Type.Number(),
  is_active: Type.Boolean(),
});
