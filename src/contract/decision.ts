/** A guardrail decision as the wire carries it. */
import { Type, type Static } from './typebox.js';
import { DENY_REASONS, RULE_KEYS } from './deny-reasons.js';
import { Nullable } from './common.js';

export const DenyReason = Type.Enum(DENY_REASONS);
export const RuleKey = Type.Enum(RULE_KEYS);
export const RuleResult = Type.Enum(['PASS', 'DENY']);
export const DecisionOutcome = Type.Enum(['ALLOW', 'DENY']);

export const DecisionSchema = Type.Object({
  outcome: DecisionOutcome,
  reason: Nullable(DenyReason),
  /** One key per rule actually evaluated, in evaluation order. */
  evaluated_rules: Type.Record(Type.String(), RuleResult),
  /** A DENY's numbers (budgets: spend_usd, budget_usd, reserved_usd, resets_at; monthly: runs, limit, resets_at; concurrency: running, limit; run_step_limit: steps, limit; run_budget: run_cost_usd, reserved_usd, limit_usd; repeated_calls: identical_calls, limit; user_rate: steps_in_window, limit, window_s, retry_after_s, retry_at); never on an ALLOW. */
  detail: Type.Optional(
    Type.Record(Type.String(), Type.Union([Type.Number(), Type.String(), Type.Boolean(), Type.Null()])),
  ),
});

/**
 * Why a guardrail denied a run start or a step, in rule priority order.
 * `MONTHLY_RUN_LIMIT_EXCEEDED` and `MAX_CONCURRENT_RUNS_EXCEEDED` only happen at run start; rules 7
 * and after (`MODEL_NOT_PRICED` on) only at step creation.
 */
export type DenyReason = Static<typeof DenyReason>;
/** Keys of a decision's `evaluated_rules`, in evaluation order. */
export type RuleKey = Static<typeof RuleKey>;
export type RuleResult = Static<typeof RuleResult>;
export type DecisionOutcome = Static<typeof DecisionOutcome>;
/** `evaluated_rules` narrowed to the rule keys the engine writes. */
export type Decision = Omit<Static<typeof DecisionSchema>, 'evaluated_rules'> & {
  evaluated_rules: Partial<Record<RuleKey, RuleResult>>;
};
