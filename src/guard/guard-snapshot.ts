/**
 * The rules' snapshot as the run API's checks build it from what they read: the workspace's state,
 * the counters, and in reserve mode the outstanding reservations and the step's estimate. Pure.
 */
import type { GuardSnapshot } from '../rules/engine.js';
import type { DailySpend, RunCounts } from '../store/counters/counters.js';
import type { Reserved } from '../store/reservations.js';
import type { GuardState } from '../store/workspaces.js';
import { localDay } from '../periods.js';

/** Run counts where no rule uses them: at a step check, or in a workspace without run limits. */
export const NOT_COUNTED: RunCounts = { monthlyRuns: 0, concurrentRuns: 0 };

export function toSnapshot(state: GuardState, counters: DailySpend & RunCounts, now?: Date): GuardSnapshot {
  const workspace = state.workspace;
  const local = now ? localDay(now, workspace.time_zone) : undefined;
  return {
    ...(local ? { dayResetsAt: local.dayResetsAt, monthResetsAt: local.monthResetsAt } : {}),
    killSwitchActive: workspace.kill_switch_active,
    userBlocked: state.userBlocked,
    workspaceDailyBudgetMicros: workspace.daily_budget_micros,
    workspaceDailySpendMicros: counters.workspaceDailySpendMicros,
    userDailyBudgetMicros: state.userDailyBudgetMicros,
    userDailySpendMicros: counters.userDailySpendMicros,
    monthlyRunLimit: workspace.monthly_run_limit,
    monthlyRuns: counters.monthlyRuns,
    maxConcurrentRuns: workspace.max_concurrent_runs,
    concurrentRuns: counters.concurrentRuns,
  };
}

/** What reserve mode adds to a snapshot: the mode, outstanding reservations, this step's estimate. */
export function reserveTerms(
  state: GuardState,
  reserved: Reserved,
  estimateMicros: number | null,
): Pick<GuardSnapshot, 'budgetMode' | 'workspaceReservedMicros' | 'userReservedMicros' | 'estimateMicros'> {
  if (state.workspace.budget_mode !== 'reserve') return {};
  return {
    budgetMode: 'reserve',
    workspaceReservedMicros: reserved.workspaceReservedMicros,
    userReservedMicros: reserved.userReservedMicros,
    estimateMicros: estimateMicros ?? 0,
  };
}

/**
 * Whether a step's check takes the reservation lock: reserve mode, an estimate, and a budget to
 * reserve against (without one, the estimate is stored, and counted once a budget is set).
 */
export function reservesAgainstBudget(state: GuardState, estimateMicros: number | null): boolean {
  return readsReservations(state) && (estimateMicros ?? 0) > 0;
}

/** Reserve mode with a daily budget (workspace or user): the budget rules count reservations. */
export function readsReservations(state: GuardState): boolean {
  return (
    state.workspace.budget_mode === 'reserve' &&
    (state.workspace.daily_budget_micros !== null || state.userDailyBudgetMicros !== null)
  );
}
