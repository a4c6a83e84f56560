/**
 * The guardrail's deny reasons, their rule keys and the sentences that explain them: once, for the
 * rule engine, the wire schemas and the SDK. Plain data with no imports, so the SDK can load it at
 * run time and stay free of dependencies, and the engine stays pure.
 */

/** In rule priority order. */
export const DENY_REASONS = [
  'KILL_SWITCH_ACTIVE',
  'USER_BLOCKED',
  'WORKSPACE_DAILY_BUDGET_EXCEEDED',
  'USER_DAILY_BUDGET_EXCEEDED',
  'MONTHLY_RUN_LIMIT_EXCEEDED',
  'MAX_CONCURRENT_RUNS_EXCEEDED',
  'MODEL_NOT_PRICED',
  'RUN_STEP_LIMIT_EXCEEDED',
  'RUN_BUDGET_EXCEEDED',
  'REPEATED_CALL_LOOP',
  'USER_RATE_LIMITED',
  'TOOL_NOT_ALLOWED',
  'BUDGET_EXCEEDED',
] as const;

/** Keys of a decision's `evaluated_rules`, in evaluation order. */
export const RULE_KEYS = [
  'kill_switch',
  'user_blocked',
  'workspace_daily_budget',
  'user_daily_budget',
  'monthly_run_limit',
  'max_concurrent_runs',
  'model_priced',
  'run_step_limit',
  'run_budget',
  'repeated_calls',
  'user_rate',
  'tool_allowed',
  'budgets',
] as const;

/** What each denial means, as a clause to put in a sentence ("...was blocked: <clause>."). */
export const DENY_SENTENCES: Readonly<Record<(typeof DENY_REASONS)[number], string>> = {
  KILL_SWITCH_ACTIVE: 'the workspace kill switch is on',
  USER_BLOCKED: 'the user is blocked',
  WORKSPACE_DAILY_BUDGET_EXCEEDED: "the workspace's daily budget is spent",
  USER_DAILY_BUDGET_EXCEEDED: "the user's daily budget is spent",
  MONTHLY_RUN_LIMIT_EXCEEDED: "the workspace's monthly run limit is reached",
  MAX_CONCURRENT_RUNS_EXCEEDED: "the workspace's limit of concurrent runs is reached",
  MODEL_NOT_PRICED: 'the model has no price and the workspace denies unpriced models',
  RUN_STEP_LIMIT_EXCEEDED: "the run's step limit is reached",
  RUN_BUDGET_EXCEEDED: "the run's budget is spent",
  REPEATED_CALL_LOOP: 'the run repeats the same call in a loop',
  USER_RATE_LIMITED: "the user's limit of steps per minute is reached (retry later)",
  TOOL_NOT_ALLOWED: "the workspace's tool policy does not allow this tool",
  BUDGET_EXCEEDED: 'a budget of the workspace, this key, a tag of the run or the user is spent',
};
