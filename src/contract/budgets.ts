/** Budgets on the wire: what `/v1/budgets` takes and answers (rule 13 `budgets`, docs/budgets.md). */
import { Type, type Static } from './typebox.js';
import { Nullable, Timestamp, Usd, Uuid, UuidParam } from './common.js';

export const BUDGET_SCOPES = ['workspace', 'user', 'key', 'tag'] as const;
export const BUDGET_PERIODS = ['day', 'week', 'month'] as const;
export const BUDGET_ACTIONS = ['deny', 'alert'] as const;

export const BudgetScope = Type.Enum(BUDGET_SCOPES);
export const BudgetPeriod = Type.Enum(BUDGET_PERIODS);
export const BudgetAction = Type.Enum(BUDGET_ACTIONS);
export type BudgetScope = Static<typeof BudgetScope>;
export type BudgetPeriod = Static<typeof BudgetPeriod>;
export type BudgetAction = Static<typeof BudgetAction>;

/** A budget, with its spend and reset in the current window of the workspace's time zone. */
export const Budget = Type.Object({
  id: Uuid,
  scope: BudgetScope,
  /** A user id, an API key id, or a tag `key:value`; null for the workspace. */
  subject: Nullable(Type.String()),
  period: BudgetPeriod,
  limit_usd: Type.Number(),
  /** "deny": rule 13 denies once spent; "alert": only `budget.threshold` events. */
  action: BudgetAction,
  spend_usd: Type.Number(),
  resets_at: Timestamp,
  created_at: Timestamp,
});
export type Budget = Static<typeof Budget>;

export const BudgetList = Type.Array(Budget);

/** `POST /v1/budgets`. */
export const BudgetCreateBody = Type.Object(
  {
    scope: BudgetScope,
    subject: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 256 }))),
    period: BudgetPeriod,
    limit_usd: Usd,
    action: Type.Optional(BudgetAction),
  },
  { additionalProperties: false },
);
export type BudgetCreateBody = Static<typeof BudgetCreateBody>;

/** `PATCH /v1/budgets/{id}`: the period, the limit or the action; scope and subject stay. */
export const BudgetUpdateBody = Type.Object(
  {
    period: Type.Optional(BudgetPeriod),
    limit_usd: Type.Optional(Usd),
    action: Type.Optional(BudgetAction),
  },
  { additionalProperties: false },
);
export type BudgetUpdateBody = Static<typeof BudgetUpdateBody>;

export const BudgetListQuery = Type.Object({
  scope: Type.Optional(BudgetScope),
  subject: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
});
export type BudgetListQuery = Static<typeof BudgetListQuery>;

export const BudgetParams = Type.Object({ id: UuidParam });
export type BudgetParams = Static<typeof BudgetParams>;
