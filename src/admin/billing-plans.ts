/** Billing as `/v1/billing` shows it: the workspace's plan tier, its limits, and every tier. */
import { PLAN_NAMES, type Billing, type PlanName } from '../contract/index.js';
import type { WorkspaceRow } from '../store/workspaces.js';
import type { GuardSettings } from './guard-settings.js';
import { planView } from './plans.js';
import type { Actor } from '../webhooks/webhook-events.js';

function billingView(workspace: WorkspaceRow): Billing {
  return {
    plan: workspace.plan,
    limits: {
      monthly_run_limit: workspace.monthly_run_limit,
      max_concurrent_runs: workspace.max_concurrent_runs,
      kill_switch: planView(workspace.plan).kill_switch,
    },
    plans: PLAN_NAMES.map(planView),
  };
}

export class BillingPlans {
  constructor(private readonly settings: GuardSettings) {}

  async read(workspaceId: string): Promise<Billing> {
    return billingView(await this.settings.workspace(workspaceId));
  }

  /** Moves to another tier; limits follow it (see `planChange`). */
  async change(actor: Actor, workspaceId: string, plan: PlanName): Promise<Billing> {
    return billingView(await this.settings.changePlan(actor, workspaceId, plan));
  }
}
