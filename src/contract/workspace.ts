/** A workspace's configuration on the wire: what `/v1/workspace` answers and its PATCH takes. */
import { Type, type Static } from './typebox.js';
import { Nullable, Timestamp, Usd, Uuid } from './common.js';
import { RetentionDays } from './deletion.js';
import { ToolPolicy } from './mcp.js';
import { RunCountLimit } from './runs.js';

const Limit = Type.Integer({ minimum: 0, maximum: 1_000_000_000 });

export const Workspace = Type.Object({
  id: Uuid,
  name: Type.String(),
  plan: Type.String(),
  kill_switch_active: Type.Boolean(),
  daily_budget_usd: Nullable(Type.Number()),
  user_daily_budget_usd: Nullable(Type.Number()),
  monthly_run_limit: Nullable(Type.Integer()),
  max_concurrent_runs: Nullable(Type.Integer()),
  /** Days ended runs are kept before the purge deletes them; null: forever. */
  retention_days: Nullable(Type.Integer()),
  unpriced_models: Type.Enum(['allow', 'deny']),
  /** "reserve": each step reserves its cost estimate first (docs/budgets.md). */
  budget_mode: Type.Enum(['spend', 'reserve']),
  /** What an API step without max_cost_usd reserves in "reserve" mode. */
  default_step_reservation_usd: Type.Number(),
  /** Defaults of every new run's limits (docs/limits.md); null: off. */
  run_max_steps: Nullable(Type.Integer()),
  run_max_cost_usd: Nullable(Type.Number()),
  run_max_identical_calls: Nullable(Type.Integer()),
  /** Steps a user may create per minute, across its runs; null: no limit. */
  user_steps_per_minute: Nullable(Type.Integer()),
  /** IANA zone whose local midnights start days, weeks and months (budgets, run limit, usage). */
  time_zone: Type.String(),
  /** Which tools steps may call (rule tool_allowed, docs/mcp.md); null: every tool. */
  tool_policy: Nullable(ToolPolicy),
  updated_at: Timestamp,
});
export type Workspace = Static<typeof Workspace>;

/** `PATCH /v1/workspace`: what is absent is left as it is; USD amounts, null = unlimited. */
export const WorkspaceUpdateBody = Type.Object(
  {
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
    daily_budget_usd: Type.Optional(Nullable(Usd)),
    user_daily_budget_usd: Type.Optional(Nullable(Usd)),
    monthly_run_limit: Type.Optional(Nullable(Limit)),
    max_concurrent_runs: Type.Optional(Nullable(Limit)),
    retention_days: Type.Optional(RetentionDays),
    /** "deny": a model call of a model without an active price is denied MODEL_NOT_PRICED. */
    unpriced_models: Type.Optional(Type.Enum(['allow', 'deny'])),
    /** "reserve": rules 3 and 4 count outstanding reservations and this step's estimate. */
    budget_mode: Type.Optional(Type.Enum(['spend', 'reserve'])),
    /** null: back to the default ($0.05). */
    default_step_reservation_usd: Type.Optional(Nullable(Usd)),
    /** Runaway agents (docs/limits.md): defaults of every new run's limits, and a user rate. */
    run_max_steps: Type.Optional(Nullable(RunCountLimit)),
    run_max_cost_usd: Type.Optional(Nullable(Usd)),
    run_max_identical_calls: Type.Optional(Nullable(RunCountLimit)),
    user_steps_per_minute: Type.Optional(Nullable(RunCountLimit)),
    /** An IANA name (`Europe/Paris`) or `UTC`; an unknown name is a 422. */
    time_zone: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    /** Allow and deny patterns over `{server}.{tool}` (rule tool_allowed); null: every tool. */
    tool_policy: Type.Optional(Nullable(ToolPolicy)),
  },
  { additionalProperties: false },
);
export type WorkspaceUpdateBody = Static<typeof WorkspaceUpdateBody>;

/** `POST /v1/workspace/kill-switch`: on denies every run start and step of the workspace. */
export const KillSwitchBody = Type.Object({ active: Type.Boolean() }, { additionalProperties: false });
export type KillSwitchBody = Static<typeof KillSwitchBody>;
export const KillSwitch = Type.Object({ active: Type.Boolean(), updated_at: Timestamp });
export type KillSwitch = Static<typeof KillSwitch>;
