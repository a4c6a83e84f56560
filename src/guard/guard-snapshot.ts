/**
 * The rules' snapshot as the run API's checks build it from what they read: the workspace's state,
 * the counters, and in reserve mode the outstanding reservations and the step's estimate. Pure.
 */
import type { BudgetCheck, GuardSnapshot } from '../rules/engine.js';
import type { BudgetRule } from '../store/budgets.js';
import { subjectOf, type DailySpend, type RunCounts } from '../store/counters/counters.js';
import type { Reserved } from '../store/reservations.js';
import type { GuardState } from '../store/workspaces.js';
import { localDay, periodWindow, type LocalDay } from '../periods.js';

/** Run counts where no rule uses them: at a step check, or in a workspace without run limits. */
export const NOT_COUNTED: RunCounts = { monthlyRuns: 0, concurrentRuns: 0 };

/** What a decision is about, fixed before its reads: who makes the call, its estimate, the moment. */
export interface DecisionFacts {
  call: BudgetedCall;
  /** The step's estimate (reserve mode counts it); null: none. */
  estimateMicros: number | null;
  now: Date;
}

/**
 * The rules' snapshot of a decision: the workspace's state, the counters, in reserve mode the
 * outstanding reservations and the estimate, and rule 13's budgets. Built as one object of one
 * shape, every optional term present (undefined where it does not apply): a decision is made on
 * every call, and spreading its parts together cost more than the rules that read it. A step's
 * own terms (`modelPriced`, `runSteps`...) are set on it by the step's check.
 */
export function toSnapshot(
  state: GuardState,
  facts: DecisionFacts,
  counted: DailySpend,
  reserved: Reserved,
  counts: RunCounts,
): GuardSnapshot {
  const workspace = state.workspace;
  const local = localDay(facts.now, workspace.time_zone);
  const reserving = workspace.budget_mode === 'reserve';
  return {
    killSwitchActive: workspace.kill_switch_active,
    userBlocked: state.userBlocked,
    workspaceDailyBudgetMicros: workspace.daily_budget_micros,
    workspaceDailySpendMicros: counted.workspaceDailySpendMicros,
    userDailyBudgetMicros: state.userDailyBudgetMicros,
    userDailySpendMicros: counted.userDailySpendMicros,
    monthlyRunLimit: workspace.monthly_run_limit,
    monthlyRuns: counts.monthlyRuns,
    maxConcurrentRuns: workspace.max_concurrent_runs,
    concurrentRuns: counts.concurrentRuns,
    workspaceReservedMicros: reserving ? reserved.workspaceReservedMicros : undefined,
    userReservedMicros: reserving ? reserved.userReservedMicros : undefined,
    budgetMode: reserving ? 'reserve' : undefined,
    estimateMicros: reserving ? (facts.estimateMicros ?? 0) : undefined,
    dayResetsAt: local.dayResetsAt,
    monthResetsAt: local.monthResetsAt,
    modelPriced: undefined,
    runSteps: undefined,
    runCost: undefined,
    repeatedCalls: undefined,
    userRate: undefined,
    toolPolicy: undefined,
    budgets: budgetChecks(state, facts.call, counted, reserved, local),
  };
}

/**
 * Whether a step's check takes the reservation lock: reserve mode, an estimate, and a budget to
 * reserve against (without one, the estimate is stored, and counted once a budget is set).
 */
export function reservesAgainstBudget(state: GuardState, estimateMicros: number | null): boolean {
  return readsReservations(state) && (estimateMicros ?? 0) > 0;
}

/** Reserve mode with a daily budget (workspace or user) or a deny budget: the budget rules count reservations. */
export function readsReservations(state: GuardState): boolean {
  return (
    state.workspace.budget_mode === 'reserve' &&
    (state.workspace.daily_budget_micros !== null ||
      state.userDailyBudgetMicros !== null ||
      state.budgets.some((budget) => budget.action === 'deny'))
  );
}

const SCOPE_ORDER: Record<BudgetRule['scope'], number> = { workspace: 0, key: 1, tag: 2, user: 3 };
const PERIOD_ORDER: Record<BudgetRule['period'], number> = { day: 0, week: 1, month: 2 };

/**
 * Who a call is: the budgets that apply to it are the workspace's, its user's, and its subjects'
 * (`callSubjects`: the key that makes it, its run's tags).
 */
export interface BudgetedCall {
  userId: string;
  subjects: readonly string[];
}

function appliesTo(budget: BudgetRule, call: BudgetedCall): boolean {
  switch (budget.scope) {
    case 'workspace':
      return true;
    case 'user':
      return budget.subject === call.userId;
    default:
      return budget.subject !== null && call.subjects.includes(subjectOf(budget.scope, budget.subject));
  }
}

/** The deny budgets that apply to a call, in the order a denial reports them. */
function applicableBudgets(state: GuardState, call: BudgetedCall): BudgetRule[] {
  return state.budgets
    .filter((budget) => budget.action === 'deny' && appliesTo(budget, call))
    .sort(
      (one, other) =>
        SCOPE_ORDER[one.scope] - SCOPE_ORDER[other.scope] || PERIOD_ORDER[one.period] - PERIOD_ORDER[other.period],
    );
}

/**
 * Rule 13's inputs: each applicable budget with its window's spend (read with the day's, see
 * `scopeFor`), its reservations in reserve mode, and its reset; undefined when none applies.
 */
function budgetChecks(
  state: GuardState,
  call: BudgetedCall,
  spend: DailySpend,
  reserved: Reserved,
  local: LocalDay,
): BudgetCheck[] | undefined {
  if (state.budgets.length === 0) return undefined;
  const budgets = applicableBudgets(state, call);
  if (budgets.length === 0) return undefined;
  const reserving = state.workspace.budget_mode === 'reserve';
  return budgets.map((budget) => ({
    budgetId: budget.id,
    scope: budget.scope,
    subject: budget.subject,
    period: budget.period,
    limitMicros: budget.limitMicros,
    spendMicros: budgetSpend(budget, spend),
    reservedMicros: reserving ? budgetReserved(budget, reserved) : 0,
    resetsAt: periodWindow(local, budget.period).resetsAt,
  }));
}

/** What a budget's window counted: its scope's spend of the day, week or month. */
function budgetSpend(budget: BudgetRule, spend: DailySpend): number {
  const { period } = budget;
  switch (budget.scope) {
    case 'workspace':
      return period === 'day' ? spend.workspaceDailySpendMicros : (spend[period]?.workspaceMicros ?? 0);
    case 'user':
      return period === 'day' ? spend.userDailySpendMicros : (spend[period]?.userMicros ?? 0);
    default:
      return spend.subjects?.[subjectOf(budget.scope, budget.subject!)]?.[period] ?? 0;
  }
}

/** The outstanding reservations a budget counts (reserve mode). */
function budgetReserved(budget: BudgetRule, reserved: Reserved): number {
  switch (budget.scope) {
    case 'workspace':
      return reserved.workspaceReservedMicros;
    case 'user':
      return reserved.userReservedMicros;
    default:
      return reserved.subjectsReservedMicros?.[subjectOf(budget.scope, budget.subject!)] ?? 0;
  }
}
