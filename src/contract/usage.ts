/** Usage against budgets and limits, and the plan tiers, on the wire: `/v1/usage`, `/v1/billing`. */
import { Type, type Static } from './typebox.js';
import { Nullable } from './common.js';
import { REPORT_GROUPS, type ReportGroup } from './report-groups.js';

export { REPORT_GROUPS, type ReportGroup };

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

const LocalDate = Type.String({ pattern: '^[0-9]{4}-[0-9]{2}-[0-9]{2}$', description: 'YYYY-MM-DD' });

/** `GET /v1/usage/report`: local dates, both included, in the workspace's time zone. */
export const SpendReportQuery = Type.Object({
  from: LocalDate,
  to: LocalDate,
  group_by: Type.String({ minLength: 1, maxLength: 100, description: [...REPORT_GROUPS, 'tag:{name}'].join(' | ') }),
});
export type SpendReportQuery = Static<typeof SpendReportQuery>;

const SpendFigures = {
  spend_usd: Type.Number(),
  tokens: Type.Integer(),
  calls: Type.Integer(),
  /** Model calls recorded with tokens and no price: in `calls` and `tokens`, counting $0. */
  unpriced_calls: Type.Integer(),
};

/** One group's spend; `key` null holds what matches no group (a run started without a key). */
export const SpendReportRow = Type.Object({ key: Nullable(Type.String()), ...SpendFigures });
export type SpendReportRow = Static<typeof SpendReportRow>;

export const SpendReport = Type.Object({
  from: Type.String(),
  to: Type.String(),
  group_by: Type.String(),
  rows: Type.Array(SpendReportRow),
  total: Type.Object(SpendFigures),
});
export type SpendReport = Static<typeof SpendReport>;

/** The CSV form's header: the row fields in order, no total line. */
export const SPEND_REPORT_CSV_HEADER = 'key,spend_usd,tokens,calls,unpriced_calls';
