/**
 * The guardrail engine. Pure: no I/O, no clock, no imports from storage or HTTP. It takes a
 * boundary and a snapshot of the state the rules read, and returns the decision.
 */

// The wire's names for reasons, rule keys and the decision: the contract declares them once.
import type { Decision, DenyReason, RuleKey } from '../contract/decision.js';
import type { DenialDetail } from '../contract/denial-detail.js';
import { toolRefusal, type ToolPolicyLists } from './tool-patterns.js';

export type { Decision, DenialDetail, DenyReason, RuleKey };

export type Boundary = 'run_start' | 'step';

/**
 * A budget of `/v1/budgets` that applies to the call (rule 13), with what its window counts: the
 * spend since the window started, and in reserve mode the outstanding reservations it counts.
 */
export interface BudgetCheck {
  budgetId: string;
  scope: 'workspace' | 'user' | 'key' | 'tag';
  subject: string | null;
  period: 'day' | 'week' | 'month';
  limitMicros: number;
  spendMicros: number;
  reservedMicros: number;
  /** When the window ends (ISO 8601 UTC). */
  resetsAt: string;
}

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
  /** Outstanding reservations counted against the budgets (reserve mode); 0 otherwise. */
  workspaceReservedMicros?: number;
  userReservedMicros?: number;
  /**
   * `budget_mode: "reserve"`: rules 3 and 4 deny when spend + outstanding reservations + this
   * step's estimate would pass the budget (or spend + reservations already reach it). Absent:
   * "spend": the budget is checked against spend alone.
   */
  budgetMode?: 'spend' | 'reserve';
  /** The upper bound of this step's cost, reserved if it is allowed (reserve mode); 0 or absent: none. */
  estimateMicros?: number;
  /** When the day's and the month's windows end (ISO 8601 UTC): what a denial's detail says. */
  dayResetsAt?: string;
  monthResetsAt?: string;
  /**
   * A MODEL_CALL step in a workspace with `unpriced_models: "deny"`: whether its model has an
   * active price. Absent (any other step or setting): the rule is not evaluated.
   */
  modelPriced?: { model: string | null; priced: boolean };
  /** The run's `max_steps` and the steps it was allowed so far (denied ones do not count). Absent: no limit. */
  runSteps?: { allowed: number; limit: number };
  /**
   * The run's `max_cost_usd` and its recorded cost; `reservedMicros` (reserve mode, issue "Budgets
   * that hold") its outstanding reservations, 0 otherwise. Absent: no limit.
   */
  runCost?: {
    costMicros: number;
    reservedMicros: number;
    limitMicros: number;
    /** Reserve mode only: this step's estimate, which may not take the run past its limit. */
    estimateMicros?: number;
  };
  /**
   * The run's `max_identical_calls` and how many of its allowed steps in a row, just before this
   * one, were this same call (type, model or tool, input). Absent: no limit.
   */
  repeatedCalls?: { identicalCalls: number; limit: number };
  /**
   * The workspace's `user_steps_per_minute` and the user's allowed steps in the window before this
   * one; `retryAt` is when the oldest of them leaves it (ISO 8601 UTC). Absent: no limit.
   */
  userRate?: {
    stepsInWindow: number;
    limit: number;
    windowSeconds: number;
    retryAt: string;
    retryAfterSeconds: number;
  };
  /**
   * A TOOL_CALL step in a workspace with a `tool_policy`: its tool (`{server}.{tool}`, null when
   * the step names none) and the policy. Absent: the rule is not evaluated.
   */
  toolPolicy?: { tool: string | null; policy: ToolPolicyLists };
  /**
   * Rule 13: the deny budgets that apply, in the order a denial reports them (workspace, key,
   * tag, user; then day, week, month). Absent or empty: the rule is not evaluated.
   */
  budgets?: readonly BudgetCheck[];
}

interface Rule {
  key: RuleKey;
  reason: DenyReason;
  /** Rules 7 and after are evaluated only where configured; rules 1 to 6 always. */
  configured?(s: GuardSnapshot): boolean;
  denies(s: GuardSnapshot): boolean;
  explain(s: GuardSnapshot): DenialDetail;
}

/** Microdollars as USD: one correctly rounded division (the money helpers are not imported: the engine stays alone). */
const usd = (micros: number): number => micros / 1_000_000;

const budgetDetail = (
  spend: number,
  budget: number | null,
  reserved: number | undefined,
  resetsAt: string | undefined,
): DenialDetail => ({
  spend_usd: usd(spend),
  budget_usd: usd(budget ?? 0),
  reserved_usd: usd(reserved ?? 0),
  resets_at: resetsAt ?? null,
});

/** Spend so far at or over the budget denies, so a budget of 0 denies everything. */
const reached = (amount: number, limit: number | null): boolean => limit !== null && amount >= limit;

/**
 * A budget rule's test. Spend mode: spend so far reaches the budget. Reserve mode: spend and the
 * outstanding reservations reach it, or this step's estimate would take them past it.
 */
function budgetDenies(
  snapshot: GuardSnapshot,
  spend: number,
  reserved: number | undefined,
  budget: number | null,
): boolean {
  if (snapshot.budgetMode !== 'reserve') return reached(spend, budget);
  const committed = spend + (reserved ?? 0);
  return reached(committed, budget) || (budget !== null && committed + (snapshot.estimateMicros ?? 0) > budget);
}

/** Rule 13: the first applicable budget that is spent, in reporting order. */
const spentBudget = (snapshot: GuardSnapshot): BudgetCheck | undefined =>
  snapshot.budgets?.find((budget) =>
    budgetDenies(snapshot, budget.spendMicros, budget.reservedMicros, budget.limitMicros),
  );

const BUDGETS_RULE: Rule = {
  key: 'budgets',
  reason: 'BUDGET_EXCEEDED',
  configured: (snapshot) => (snapshot.budgets?.length ?? 0) > 0,
  denies: (snapshot) => spentBudget(snapshot) !== undefined,
  explain: (snapshot) => {
    const budget = spentBudget(snapshot)!;
    return {
      ...(budgetDetail(budget.spendMicros, budget.limitMicros, budget.reservedMicros, budget.resetsAt) as {
        spend_usd: number;
        budget_usd: number;
        reserved_usd: number;
        resets_at: string | null;
      }),
      budget_id: budget.budgetId,
      scope: budget.scope,
      subject: budget.subject,
      period: budget.period,
    };
  },
};

/** In priority order. A run start evaluates all of them; a step creation the first four. */
const RULES: readonly Rule[] = [
  {
    key: 'kill_switch',
    reason: 'KILL_SWITCH_ACTIVE',
    denies: (snapshot) => snapshot.killSwitchActive,
    explain: () => ({ kill_switch_active: true }),
  },
  {
    key: 'user_blocked',
    reason: 'USER_BLOCKED',
    denies: (snapshot) => snapshot.userBlocked,
    explain: () => ({ user_blocked: true }),
  },
  {
    key: 'workspace_daily_budget',
    reason: 'WORKSPACE_DAILY_BUDGET_EXCEEDED',
    denies: (snapshot) =>
      budgetDenies(
        snapshot,
        snapshot.workspaceDailySpendMicros,
        snapshot.workspaceReservedMicros,
        snapshot.workspaceDailyBudgetMicros,
      ),
    explain: (snapshot) =>
      budgetDetail(
        snapshot.workspaceDailySpendMicros,
        snapshot.workspaceDailyBudgetMicros,
        snapshot.workspaceReservedMicros,
        snapshot.dayResetsAt,
      ),
  },
  {
    key: 'user_daily_budget',
    reason: 'USER_DAILY_BUDGET_EXCEEDED',
    denies: (snapshot) =>
      budgetDenies(
        snapshot,
        snapshot.userDailySpendMicros,
        snapshot.userReservedMicros,
        snapshot.userDailyBudgetMicros,
      ),
    explain: (snapshot) =>
      budgetDetail(
        snapshot.userDailySpendMicros,
        snapshot.userDailyBudgetMicros,
        snapshot.userReservedMicros,
        snapshot.dayResetsAt,
      ),
  },
  {
    key: 'monthly_run_limit',
    reason: 'MONTHLY_RUN_LIMIT_EXCEEDED',
    denies: (snapshot) => reached(snapshot.monthlyRuns, snapshot.monthlyRunLimit),
    explain: (snapshot) => ({
      runs: snapshot.monthlyRuns,
      limit: snapshot.monthlyRunLimit ?? 0,
      resets_at: snapshot.monthResetsAt ?? null,
    }),
  },
  {
    key: 'max_concurrent_runs',
    reason: 'MAX_CONCURRENT_RUNS_EXCEEDED',
    denies: (snapshot) => reached(snapshot.concurrentRuns, snapshot.maxConcurrentRuns),
    explain: (snapshot) => ({ running: snapshot.concurrentRuns, limit: snapshot.maxConcurrentRuns ?? 0 }),
  },
];

const RULES_AT: Record<Boundary, readonly Rule[]> = {
  // Rule 13 is evaluated at run start too, after the seed's six.
  run_start: [...RULES, BUDGETS_RULE],
  step: [
    ...RULES.slice(0, 4),
    // Rules 7 and after: at step creation only, after rule 4, each where configured.
    {
      key: 'model_priced',
      reason: 'MODEL_NOT_PRICED',
      configured: (snapshot) => snapshot.modelPriced !== undefined,
      denies: (snapshot) => snapshot.modelPriced?.priced === false,
      explain: (snapshot) => ({ model: snapshot.modelPriced?.model ?? null, unpriced_models: 'deny' }),
    },
    {
      key: 'run_step_limit',
      reason: 'RUN_STEP_LIMIT_EXCEEDED',
      configured: (snapshot) => snapshot.runSteps !== undefined,
      denies: (snapshot) => snapshot.runSteps!.allowed >= snapshot.runSteps!.limit,
      explain: (snapshot) => ({ steps: snapshot.runSteps!.allowed, limit: snapshot.runSteps!.limit }),
    },
    {
      key: 'run_budget',
      reason: 'RUN_BUDGET_EXCEEDED',
      configured: (snapshot) => snapshot.runCost !== undefined,
      // As the daily budgets: a cost at or over the limit denies, so a limit of 0 denies every step.
      // Reserve mode also counts the run's reservations, and denies a step whose estimate would pass it.
      denies: ({ runCost }) => {
        const committed = runCost!.costMicros + runCost!.reservedMicros;
        const estimate = runCost!.estimateMicros;
        return (
          committed >= runCost!.limitMicros || (estimate !== undefined && committed + estimate > runCost!.limitMicros)
        );
      },
      explain: (snapshot) => ({
        run_cost_usd: usd(snapshot.runCost!.costMicros),
        reserved_usd: usd(snapshot.runCost!.reservedMicros),
        limit_usd: usd(snapshot.runCost!.limitMicros),
      }),
    },
    {
      key: 'repeated_calls',
      reason: 'REPEATED_CALL_LOOP',
      configured: (snapshot) => snapshot.repeatedCalls !== undefined,
      // max_identical_calls in a row are allowed; the next identical one is the loop.
      denies: (snapshot) => snapshot.repeatedCalls!.identicalCalls >= snapshot.repeatedCalls!.limit,
      explain: (snapshot) => ({
        identical_calls: snapshot.repeatedCalls!.identicalCalls,
        limit: snapshot.repeatedCalls!.limit,
      }),
    },
    {
      key: 'user_rate',
      reason: 'USER_RATE_LIMITED',
      configured: (snapshot) => snapshot.userRate !== undefined,
      denies: (snapshot) => snapshot.userRate!.stepsInWindow >= snapshot.userRate!.limit,
      explain: (snapshot) => ({
        steps_in_window: snapshot.userRate!.stepsInWindow,
        limit: snapshot.userRate!.limit,
        window_s: snapshot.userRate!.windowSeconds,
        retry_after_s: snapshot.userRate!.retryAfterSeconds,
        retry_at: snapshot.userRate!.retryAt,
      }),
    },
    {
      key: 'tool_allowed',
      reason: 'TOOL_NOT_ALLOWED',
      configured: (snapshot) => snapshot.toolPolicy !== undefined,
      denies: ({ toolPolicy }) => toolRefusal(toolPolicy!.policy, toolPolicy!.tool ?? '') !== undefined,
      explain: ({ toolPolicy }) => ({
        tool: toolPolicy!.tool ?? '',
        pattern: toolRefusal(toolPolicy!.policy, toolPolicy!.tool ?? '')?.pattern ?? null,
      }),
    },
    BUDGETS_RULE,
  ],
};

export function evaluate(boundary: Boundary, snapshot: GuardSnapshot): Decision {
  const evaluated: Decision['evaluated_rules'] = {};
  for (const rule of RULES_AT[boundary]) {
    if (rule.configured && !rule.configured(snapshot)) continue;
    if (rule.denies(snapshot)) {
      evaluated[rule.key] = 'DENY';
      return { outcome: 'DENY', reason: rule.reason, evaluated_rules: evaluated, detail: rule.explain(snapshot) };
    }
    evaluated[rule.key] = 'PASS';
  }
  return { outcome: 'ALLOW', reason: null, evaluated_rules: evaluated };
}
