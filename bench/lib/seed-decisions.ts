/**
 * Decisions as the daemon stores them with a run or a step, for benchmarks that seed the database
 * directly: the rules a run start and a step evaluate, all passing, or a start the user's daily
 * budget denied.
 */
const SEED_RULES_PASS = {
  kill_switch: 'PASS',
  user_blocked: 'PASS',
  workspace_daily_budget: 'PASS',
  user_daily_budget: 'PASS',
};

/** A step's decision: rules 1-4 pass. */
export const STEP_ALLOWED = JSON.stringify({ outcome: 'ALLOW', reason: null, evaluated_rules: SEED_RULES_PASS });

/** A run start's decision: all six rules pass. */
export const RUN_ALLOWED = JSON.stringify({
  outcome: 'ALLOW',
  reason: null,
  evaluated_rules: { ...SEED_RULES_PASS, monthly_run_limit: 'PASS', max_concurrent_runs: 'PASS' },
});

/** A run start denied by rule 4, evaluation stopping there. */
export const RUN_BLOCKED = JSON.stringify({
  outcome: 'DENY',
  reason: 'USER_DAILY_BUDGET_EXCEEDED',
  evaluated_rules: { ...SEED_RULES_PASS, user_daily_budget: 'DENY' },
});
