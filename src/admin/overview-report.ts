/**
 * Today's aggregates (the workspace's local day) the dashboard's overview shows beside the usage: denials by reason,
 * top users and models by spend, unpriced model calls.
 */
import type { Overview } from '../contract/index.js';
import { microsToUsd, numericToUsd } from '../money/decimal.js';
import type { Clock } from '../clock.js';
import type { Db } from '../store/db.js';
import { readOverview } from '../store/overview.js';
import { localDay } from '../periods.js';
import { workspaceTimeZone } from '../store/workspaces.js';

export class OverviewReport {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
  ) {}

  /** `limit`: how many top users and top models. */
  async read(workspaceId: string, limit: number): Promise<Overview> {
    const { day, dayStartMs } = localDay(this.clock.now(), await workspaceTimeZone(this.db, workspaceId));
    const today = await readOverview(this.db, workspaceId, day, dayStartMs, limit);
    return {
      date: day,
      denials_by_reason: today.denials,
      top_users: today.topUsers.map((user) => ({
        user_id: user.userId,
        spend_usd: microsToUsd(user.spendMicros),
        runs: user.runs,
      })),
      top_models: today.topModels.map((model) => ({
        model: model.model,
        spend_usd: numericToUsd(model.spendUsd) ?? 0,
        calls: model.calls,
        tokens: model.tokens,
      })),
      unpriced_calls: today.unpriced,
    };
  }
}
