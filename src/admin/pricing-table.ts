/**
 * A workspace's model prices as the API reads and changes them. Every change goes through
 * GuardSettings, the only writer of what a decision reads, which tells the next decision of it.
 */
import type { ModelPricing, PriceBody, PricingImport, PricingImportBody } from '../contract/index.js';
import type { Db } from '../store/db.js';
import { listActivePricing } from '../store/pricing.js';
import type { GuardSettings } from './guard-settings.js';
import type { Actor } from '../webhooks/webhook-events.js';

export class PricingTable {
  constructor(
    private readonly db: Db,
    private readonly settings: GuardSettings,
  ) {}

  /** Every active entry of the workspace. */
  list(workspaceId: string): Promise<ModelPricing[]> {
    return listActivePricing(this.db, workspaceId);
  }

  /** Creates or updates a model's price; the entry becomes the user's, which imports keep. */
  set(actor: Actor, workspaceId: string, model: string, body: PriceBody): Promise<ModelPricing> {
    return this.settings.setPricing(actor, workspaceId, model, body);
  }

  /** Imports catalog prices, and counts what the import did (or would do, in a dry run). */
  async import(actor: Actor, workspaceId: string, body: PricingImportBody): Promise<PricingImport> {
    const { models, overwrite, dry_run: dryRun } = body;
    const items = await this.settings.importPricing(actor, workspaceId, models, { overwrite, dryRun });
    const count = (change: string) => items.filter((item) => item.change === change).length;
    return {
      items,
      new: count('new'),
      changed: count('changed'),
      unchanged: count('unchanged'),
      kept: count('kept'),
      dry_run: dryRun,
    };
  }

  delete(workspaceId: string, model: string): Promise<void> {
    return this.settings.deletePricing(workspaceId, model);
  }
}
