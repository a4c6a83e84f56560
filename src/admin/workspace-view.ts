/** A workspace as the API answers it and its events tell of it: USD, not microdollars. */
import type { Workspace } from '../contract/index.js';
import { microsToUsd } from '../money/decimal.js';
import type { WorkspaceRow } from '../store/workspaces.js';

const usd = (micros: number | null) => (micros === null ? null : microsToUsd(micros));

export function workspaceView(workspace: WorkspaceRow): Workspace {
  return {
    id: workspace.id,
    name: workspace.name,
    plan: workspace.plan,
    kill_switch_active: workspace.kill_switch_active,
    daily_budget_usd: usd(workspace.daily_budget_micros),
    user_daily_budget_usd: usd(workspace.user_daily_budget_micros),
    monthly_run_limit: workspace.monthly_run_limit,
    max_concurrent_runs: workspace.max_concurrent_runs,
    retention_days: workspace.retention_days,
    unpriced_models: workspace.unpriced_models,
    budget_mode: workspace.budget_mode,
    default_step_reservation_usd: microsToUsd(workspace.default_step_reservation_micros),
    run_max_steps: workspace.run_max_steps,
    run_max_cost_usd: usd(workspace.run_max_cost_micros),
    run_max_identical_calls: workspace.run_max_identical_calls,
    user_steps_per_minute: workspace.user_steps_per_minute,
    time_zone: workspace.time_zone,
    tool_policy: workspace.tool_policy,
    updated_at: new Date(workspace.updated_at).toISOString(),
  };
}
