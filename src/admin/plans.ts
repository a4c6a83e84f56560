/** Plan tiers as licence levels: ceilings for limits, and what a plan change does to them. */
import type { PlanName } from '../contract/usage.js';
import { ApiError } from '../errors.js';
import { PLANS, type WorkspaceChanges, type WorkspaceRow } from '../store/workspaces.js';

type LimitKey = 'monthly_run_limit' | 'max_concurrent_runs';
const LIMIT_KEYS: LimitKey[] = ['monthly_run_limit', 'max_concurrent_runs'];

/** Null is unlimited, which is above any finite ceiling. */
const exceeds = (value: number | null, ceiling: number | null) =>
  ceiling !== null && (value === null || value > ceiling);

/** Refuses (403) limits above the plan's ceiling. */
export function assertWithinPlan(plan: PlanName, changes: WorkspaceChanges): void {
  for (const key of LIMIT_KEYS) {
    const value = changes[key];
    if (value === undefined) continue;
    const ceiling = PLANS[plan][key];
    if (exceeds(value, ceiling)) {
      throw new ApiError('PLAN_REQUIRED', `${key} may not exceed ${ceiling} on the ${plan} plan.`);
    }
  }
}

/**
 * The changes a move to another plan makes. Limits above the new ceiling come down to it; limits
 * left at the old plan's ceiling follow the plan up or down. A workspace whose kill switch is on
 * cannot move to a plan without one: it could then never turn it off.
 */
export function planChange(workspace: WorkspaceRow, plan: PlanName): WorkspaceChanges {
  if (workspace.kill_switch_active && !PLANS[plan].kill_switch) {
    throw new ApiError('CONFLICT', `Turn the kill switch off before moving to the ${plan} plan, which has none.`);
  }
  const changes: WorkspaceChanges = { plan };
  for (const key of LIMIT_KEYS) {
    const current = workspace[key];
    const next = PLANS[plan][key];
    if (current === PLANS[workspace.plan][key] || exceeds(current, next)) changes[key] = next;
  }
  return changes;
}

export function planView(plan: PlanName) {
  const limits = PLANS[plan];
  return { name: plan, ...limits };
}
