/**
 * The one door to what a decision reads from the records: a workspace's settings, plan and kill
 * switch, a user's block and budget, model pricing. Each change commits in a transaction of its
 * own and then bumps the workspace's state version, so the very next decision in any daemon reads
 * it; no caller has to remember either step.
 */
import { ApiError } from '../errors.js';
import type { CounterStore } from '../store/counters.js';
import type { Db, Queryable } from '../store/db.js';
import { upsertPricing, type ModelPricing, type PricingInput } from '../store/pricing.js';
import { upsertUser, type SdkUserRow } from '../store/users.js';
import {
  getWorkspace, lockWorkspace, PLANS, setKillSwitch, updateWorkspace,
  type Plan, type WorkspaceChanges, type WorkspaceRow,
} from '../store/workspaces.js';
import type { Clock } from './guard-service.js';
import { assertWithinPlan, planChange } from './plans.js';

export interface UserChanges {
  blocked?: boolean;
  daily_budget_micros?: number | null;
}

export class GuardSettings {
  constructor(
    private readonly db: Db,
    private readonly counters: CounterStore,
    private readonly clock: Clock,
  ) {}

  /** The workspace; a workspace that vanished under a valid credential answers as a bad credential. */
  async workspace(workspaceId: string): Promise<WorkspaceRow> {
    const workspace = await getWorkspace(this.db, workspaceId);
    if (!workspace) throw new ApiError('UNAUTHORIZED');
    return workspace;
  }

  /** Budgets, limits (within the plan's ceilings) and the name. */
  async updateWorkspace(workspaceId: string, changes: WorkspaceChanges): Promise<WorkspaceRow> {
    return this.change(workspaceId, async (tx, before, now) => {
      assertWithinPlan(before.plan, changes);
      return updateWorkspace(tx, workspaceId, changes, now);
    });
  }

  /** Scale plan or higher. */
  async setKillSwitch(workspaceId: string, active: boolean): Promise<WorkspaceRow> {
    return this.change(workspaceId, async (tx, before, now) => {
      if (!PLANS[before.plan].kill_switch) {
        throw new ApiError('PLAN_REQUIRED', `The kill switch needs the scale plan or higher; this workspace is on ${before.plan}.`);
      }
      return setKillSwitch(tx, workspaceId, active, now);
    });
  }

  /** Moves to another plan tier; limits follow it (see `planChange`). */
  async changePlan(workspaceId: string, plan: Plan): Promise<WorkspaceRow> {
    return this.change(workspaceId, (tx, before, now) => updateWorkspace(tx, workspaceId, planChange(before, plan), now));
  }

  /** Blocks, unblocks or sets a user's daily budget; a user never seen is created (pre-blocking). */
  async updateUser(workspaceId: string, userId: string, changes: UserChanges): Promise<SdkUserRow> {
    const now = this.clock.now();
    const user = await this.db.transaction((tx) => upsertUser(tx, workspaceId, userId, utcDay(now), changes, now));
    await this.counters.stateChanged(workspaceId);
    return user;
  }

  /** Creates or updates a model's price. */
  async setPricing(workspaceId: string, model: string, input: PricingInput): Promise<ModelPricing> {
    const pricing = await this.db.transaction((tx) => upsertPricing(tx, workspaceId, model, input, this.clock.now()));
    await this.counters.stateChanged(workspaceId);
    return pricing;
  }

  /**
   * A change to the workspace row, made under its row lock (two changes at once see each other's
   * result, not the same "before"), then the version bump: after the commit, and before the answer.
   */
  private async change(
    workspaceId: string,
    apply: (tx: Queryable, before: WorkspaceRow, now: Date) => Promise<WorkspaceRow>,
  ): Promise<WorkspaceRow> {
    const now = this.clock.now();
    const after = await this.db.transaction(async (tx) => {
      const before = await lockWorkspace(tx, workspaceId);
      if (!before) throw new ApiError('UNAUTHORIZED');
      return apply(tx, before, now);
    });
    await this.counters.stateChanged(workspaceId);
    return after;
  }
}

export const utcDay = (now: Date) => now.toISOString().slice(0, 10);
