/**
 * The only writer of what a decision reads from the records: a workspace's settings, plan and kill
 * switch, a user's block and budget, model pricing. Each change commits in a transaction of its
 * own, with the webhook event that tells of it (the outbox), and then bumps the workspace's state
 * version, so the very next decision in any daemon reads it; no caller has to remember any step.
 */
import type { PlanName } from '../contract/usage.js';
import { ApiError } from '../errors.js';
import { microsToUsd } from '../money/decimal.js';
import type { CounterStore } from '../store/counters/counters.js';
import type { Db, Queryable } from '../store/db.js';
import {
  getPricing,
  importPricing,
  upsertPricing,
  type CatalogEntry,
  type ImportedEntry,
  type ModelPricing,
  type PricingInput,
} from '../store/pricing.js';
import { getUser, upsertUser, type SdkUserRow } from '../store/users.js';
import {
  getWorkspace,
  lockWorkspace,
  workspaceTimeZone,
  PLANS,
  setKillSwitch,
  updateWorkspace,
  type WorkspaceChanges,
  type WorkspaceRow,
} from '../store/workspaces.js';
import type { Clock } from '../clock.js';
import { assertWithinPlan, planChange } from './plans.js';
import { differences, recordEvent, type Actor } from '../webhooks/webhook-events.js';
import { deletePricingEntry, deleteUser } from './deletion.js';
import { workspaceView } from './workspace-view.js';
import { localDay } from '../periods.js';

export interface UserChanges {
  blocked?: boolean;
  daily_budget_micros?: number | null;
}

const usd = (micros: number | null) => (micros === null ? null : microsToUsd(micros));

const PRICE_FIELDS = [
  'input_cost_per_token',
  'output_cost_per_token',
  'cache_read_input_cost_per_token',
  'cache_write_input_cost_per_token',
  'long_context',
  'is_active',
] as const;
/** The settings a `settings.changed` event of a workspace tells of, as the API shows them. */
const SETTINGS = [
  'name',
  'plan',
  'daily_budget_usd',
  'user_daily_budget_usd',
  'monthly_run_limit',
  'max_concurrent_runs',
  'retention_days',
  'unpriced_models',
  'budget_mode',
  'default_step_reservation_usd',
  'run_max_steps',
  'run_max_cost_usd',
  'run_max_identical_calls',
  'user_steps_per_minute',
  'time_zone',
  'tool_policy',
] as const;

/**
 * Tells of a change to what decisions read with a `settings.changed` event, in the transaction
 * that made it; a write that changed nothing tells no one.
 */
async function recordSettingsChange(
  tx: Queryable,
  workspaceId: string,
  actor: Actor,
  subject: { type: 'workspace' | 'user' | 'model_pricing'; id: string | null },
  changes: Record<string, unknown>,
  now: Date,
): Promise<void> {
  if (Object.keys(changes).length === 0) return;
  await recordEvent(tx, workspaceId, 'settings.changed', { actor, subject, changes }, now);
}

export class GuardSettings {
  constructor(
    private readonly db: Db,
    private readonly counters: CounterStore,
    private readonly clock: Clock,
    /** Told after a price changes, so this daemon's price cache (read-your-writes) drops it at once. */
    private readonly pricesChanged: (workspaceId: string) => void = () => {},
  ) {}

  /** The workspace; a workspace that vanished under a valid credential answers as a bad credential. */
  async workspace(workspaceId: string): Promise<WorkspaceRow> {
    const workspace = await getWorkspace(this.db, workspaceId);
    if (!workspace) throw new ApiError('UNAUTHORIZED');
    return workspace;
  }

  /** Budgets, limits (within the plan's ceilings) and the name. */
  async updateWorkspace(actor: Actor, workspaceId: string, changes: WorkspaceChanges): Promise<WorkspaceRow> {
    return this.change(actor, workspaceId, async (tx, before, now) => {
      assertWithinPlan(before.plan, changes);
      return updateWorkspace(tx, workspaceId, changes, now);
    });
  }

  /** Scale plan or higher. */
  async setKillSwitch(actor: Actor, workspaceId: string, active: boolean): Promise<WorkspaceRow> {
    return this.change(actor, workspaceId, async (tx, before, now) => {
      if (!PLANS[before.plan].kill_switch) {
        throw new ApiError(
          'PLAN_REQUIRED',
          `The kill switch needs the scale plan or higher; this workspace is on ${before.plan}.`,
        );
      }
      const after = await setKillSwitch(tx, workspaceId, active, now);
      if (before.kill_switch_active !== active) {
        await recordEvent(
          tx,
          workspaceId,
          'kill_switch.changed',
          { actor, active, before: before.kill_switch_active },
          now,
        );
      }
      return after;
    });
  }

  /** Moves to another plan tier; limits follow it (see `planChange`). */
  async changePlan(actor: Actor, workspaceId: string, plan: PlanName): Promise<WorkspaceRow> {
    return this.change(actor, workspaceId, (tx, before, now) =>
      updateWorkspace(tx, workspaceId, planChange(before, plan), now),
    );
  }

  /** Blocks, unblocks or sets a user's daily budget; a user never seen is created (pre-blocking). */
  async updateUser(actor: Actor, workspaceId: string, userId: string, changes: UserChanges): Promise<SdkUserRow> {
    const now = this.clock.now();
    const { day } = localDay(now, await workspaceTimeZone(this.db, workspaceId));
    const user = await this.db.transaction(async (tx) => {
      // Locked until the commit: two changes to one user at once each see the other's result.
      const before = await getUser(tx, workspaceId, userId, day, { forUpdate: true });
      const after = await upsertUser(tx, workspaceId, userId, day, changes, now);
      if ((before?.blocked ?? false) !== after.blocked) {
        await recordEvent(
          tx,
          workspaceId,
          after.blocked ? 'user.blocked' : 'user.unblocked',
          { actor, user_id: userId },
          now,
        );
      }
      const budget = differences(
        { daily_budget_usd: usd(before?.daily_budget_micros ?? null) },
        { daily_budget_usd: usd(after.daily_budget_micros) },
        ['daily_budget_usd'],
      );
      await recordSettingsChange(tx, workspaceId, actor, { type: 'user', id: userId }, budget, now);
      return after;
    });
    await this.counters.stateChanged(workspaceId);
    return user;
  }

  /** Creates or updates a model's price. */
  async setPricing(actor: Actor, workspaceId: string, model: string, input: PricingInput): Promise<ModelPricing> {
    const now = this.clock.now();
    const pricing = await this.db.transaction(async (tx) => {
      const before = await getPricing(tx, workspaceId, model, { forUpdate: true });
      const after = await upsertPricing(tx, workspaceId, model, input, now);
      const changes = before
        ? differences({ ...before }, { ...after }, PRICE_FIELDS)
        : Object.fromEntries(
            PRICE_FIELDS.filter((field) => after[field] !== null).map((field) => [
              field,
              { before: null, after: after[field] },
            ]),
          );
      await recordSettingsChange(tx, workspaceId, actor, { type: 'model_pricing', id: model }, changes, now);
      return after;
    });
    await this.counters.stateChanged(workspaceId);
    this.pricesChanged(workspaceId);
    return pricing;
  }

  /** Deletes a model's price: the model's calls are then unpriced, in every daemon's next decision. */
  async deletePricing(workspaceId: string, model: string): Promise<void> {
    await deletePricingEntry(this.db, workspaceId, model);
    await this.counters.stateChanged(workspaceId);
    this.pricesChanged(workspaceId);
  }

  /** Deletes a user's record and ended runs (see `deleteUser`): their block and budget go with it. */
  async deleteUser(workspaceId: string, userId: string): Promise<{ user_id: string; runs_deleted: number }> {
    const deleted = await deleteUser(this.db, workspaceId, userId, this.clock.now());
    await this.counters.stateChanged(workspaceId);
    return deleted;
  }

  /**
   * Imports catalog prices (see `importPricing`). One `settings.changed` event tells of every model
   * the import created or changed, keyed by model; a dry run changes nothing and tells nothing.
   */
  async importPricing(
    actor: Actor,
    workspaceId: string,
    entries: readonly CatalogEntry[],
    options: { overwrite: boolean; dryRun: boolean },
  ): Promise<ImportedEntry[]> {
    const now = this.clock.now();
    const lines = await importPricing(this.db, workspaceId, entries, {
      ...options,
      now,
      inTransaction: async (tx, imported) => {
        if (options.dryRun) return;
        const changed = imported.filter((line) => line.change === 'new' || line.change === 'changed');
        if (changed.length === 0) return;
        const changes = Object.fromEntries(
          changed.map((line) => [
            line.model,
            {
              before: line.before && Object.fromEntries(PRICE_FIELDS.map((field) => [field, line.before![field]])),
              after: Object.fromEntries(PRICE_FIELDS.map((field) => [field, line.after[field]])),
            },
          ]),
        );
        await recordSettingsChange(tx, workspaceId, actor, { type: 'model_pricing', id: null }, changes, now);
      },
    });
    if (!options.dryRun) {
      await this.counters.stateChanged(workspaceId);
      this.pricesChanged(workspaceId);
    }
    return lines;
  }

  /**
   * A change to the workspace row, made under its row lock (two changes at once see each other's
   * result, not the same "before"), with a `settings.changed` event when a setting moved; then the
   * version bump: after the commit, and before the answer.
   */
  private async change(
    actor: Actor,
    workspaceId: string,
    apply: (tx: Queryable, before: WorkspaceRow, now: Date) => Promise<WorkspaceRow>,
  ): Promise<WorkspaceRow> {
    const now = this.clock.now();
    const after = await this.db.transaction(async (tx) => {
      const before = await lockWorkspace(tx, workspaceId);
      if (!before) throw new ApiError('UNAUTHORIZED');
      const after = await apply(tx, before, now);
      const changes = differences(workspaceView(before), workspaceView(after), SETTINGS);
      await recordSettingsChange(tx, workspaceId, actor, { type: 'workspace', id: workspaceId }, changes, now);
      return after;
    });
    await this.counters.stateChanged(workspaceId);
    return after;
  }
}
