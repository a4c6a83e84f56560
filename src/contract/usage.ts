/** Usage against budgets and limits, and the plan tiers, on the wire: `/v1/usage`, `/v1/billing`. */
import { Type, type Static } from 'typebox';
import { Nullable } from './common.js';

export const UsageQuery = Type.Object({ days: Type.Integer({ minimum: 1, maximum: 366, default: 30 }) });

export const Usage = Type.Object({
  date: Type.String(),
  workspace_daily_spend_usd: Type.Number(),
  workspace_daily_budget_usd: Nullable(Type.Number()),
  monthly_runs: Type.Integer(),
  monthly_run_limit: Nullable(Type.Integer()),
  concurrent_runs: Type.Integer(),
  max_concurrent_runs: Nullable(Type.Integer()),
  daily: Type.Array(Type.Object({ date: Type.String(), spend_usd: Type.Number(), runs: Type.Integer() })),
  /** Today's model calls recorded with tokens but no price (they count $0), by model. */
  unpriced: Type.Array(Type.Object({ model: Nullable(Type.String()), calls: Type.Integer(), tokens: Type.Integer() })),
});
export type Usage = Static<typeof Usage>;

const PlanLimits = Type.Object({
  monthly_run_limit: Nullable(Type.Integer()),
  max_concurrent_runs: Nullable(Type.Integer()),
  kill_switch: Type.Boolean(),
});

/** The plan tiers, lowest first. */
export const PLAN_NAMES = ['basic', 'pro', 'scale', 'enterprise'] as const;
export type PlanName = (typeof PLAN_NAMES)[number];

/** A plan tier: a licence level, no payments. */
export const Plan = Type.Object({ name: Type.String(), ...PlanLimits.properties });
export type Plan = Static<typeof Plan>;

export const Billing = Type.Object({ plan: Type.String(), limits: PlanLimits, plans: Type.Array(Plan) });
export type Billing = Static<typeof Billing>;

/** `POST /v1/billing/plan`: the tier to move to. */
export const PlanChangeBody = Type.Object({ plan: Type.Enum([...PLAN_NAMES]) }, { additionalProperties: false });
export type PlanChangeBody = Static<typeof PlanChangeBody>;
