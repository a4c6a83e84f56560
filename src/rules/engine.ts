/**
 * The guardrail engine. Pure: no I/O, no clock, no imports from storage or HTTP. It takes a
 * boundary and a snapshot of the state the rules read, and returns the decision.
 */

// The wire's names for reasons, rule keys and the decision: the contract declares them once.
import type { Decision, DenyReason, RuleKey } from '../contract/decision.js';

export type { Decision, DenyReason, RuleKey };

export type Boundary = 'run_start' | 'step';

/** Everything the rules read. A `null` budget or limit is unlimited. Money in integer microdollars. */
export interface GuardSnapshot {
  killSwitchActive: boolean;
  userBlocked: boolean;
  workspaceDailyBudgetMicros: number | null;
  workspaceDailySpendMicros: number;
  userDailyBudgetMicros: number | null;
  userDailySpendMicros: number;
  monthlyRunLimit: number | null;
  monthlyRuns: number;
  maxConcurrentRuns: number | null;
  concurrentRuns: number;
}

interface Rule {
  key: RuleKey;
  reason: DenyReason;
  denies(s: GuardSnapshot): boolean;
}

/** Spend so far at or over the budget denies, so a budget of 0 denies everything. */
const reached = (amount: number, limit: number | null): boolean => limit !== null && amount >= limit;

/** In priority order. A run start evaluates all of them; a step creation the first four. */
const RULES: readonly Rule[] = [
  { key: 'kill_switch', reason: 'KILL_SWITCH_ACTIVE', denies: (s) => s.killSwitchActive },
  { key: 'user_blocked', reason: 'USER_BLOCKED', denies: (s) => s.userBlocked },
  {
    key: 'workspace_daily_budget',
    reason: 'WORKSPACE_DAILY_BUDGET_EXCEEDED',
    denies: (s) => reached(s.workspaceDailySpendMicros, s.workspaceDailyBudgetMicros),
  },
  {
    key: 'user_daily_budget',
    reason: 'USER_DAILY_BUDGET_EXCEEDED',
    denies: (s) => reached(s.userDailySpendMicros, s.userDailyBudgetMicros),
  },
  { key: 'monthly_run_limit', reason: 'MONTHLY_RUN_LIMIT_EXCEEDED', denies: (s) => reached(s.monthlyRuns, s.monthlyRunLimit) },
  {
    key: 'max_concurrent_runs',
    reason: 'MAX_CONCURRENT_RUNS_EXCEEDED',
    denies: (s) => reached(s.concurrentRuns, s.maxConcurrentRuns),
  },
];

const RULES_AT: Record<Boundary, readonly Rule[]> = {
  run_start: RULES,
  step: RULES.slice(0, 4),
};

export function evaluate(boundary: Boundary, snapshot: GuardSnapshot): Decision {
  const evaluated: Decision['evaluated_rules'] = {};
  for (const rule of RULES_AT[boundary]) {
    if (rule.denies(snapshot)) {
      evaluated[rule.key] = 'DENY';
      return { outcome: 'DENY', reason: rule.reason, evaluated_rules: evaluated };
    }
    evaluated[rule.key] = 'PASS';
  }
  return { outcome: 'ALLOW', reason: null, evaluated_rules: evaluated };
}
