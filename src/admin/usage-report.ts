/** Usage against budgets and limits, as `/v1/usage` answers it: today's (the workspace's local day) and a daily series. */
import type { Usage } from '../contract/index.js';
import { microsToUsd } from '../money/decimal.js';
import type { Clock } from '../clock.js';
import { localDay } from '../periods.js';
import { runCounts, workspaceScopeAt, type CounterStore } from '../store/counters/counters.js';
import type { Db } from '../store/db.js';
import { unpricedUsage } from '../store/unpriced-usage.js';
import { dailyUsage } from '../store/users.js';
import type { GuardSettings } from './guard-settings.js';

export class UsageReport {
  constructor(
    private readonly db: Db,
    private readonly counters: CounterStore,
    private readonly settings: GuardSettings,
    private readonly clock: Clock,
  ) {}

  /** Today's spend as the guards count it (the counter store), and `days` days of history. */
  async read(workspaceId: string, days: number): Promise<Usage> {
    const now = this.clock.now();
    const workspace = await this.settings.workspace(workspaceId);
    const scope = workspaceScopeAt(now, workspaceId, workspace.time_zone);
    const [spend, counts, daily, unpriced] = await Promise.all([
      this.counters.readSpend(scope),
      runCounts(this.db, scope),
      dailyUsage(this.db, scope.workspaceId, scope.day, days),
      unpricedUsage(this.db, scope.workspaceId, new Date(localDay(now, workspace.time_zone).dayStartMs)),
    ]);
    return {
      date: scope.day,
      workspace_daily_spend_usd: microsToUsd(spend.workspaceDailySpendMicros),
      workspace_daily_budget_usd:
        workspace.daily_budget_micros === null ? null : microsToUsd(workspace.daily_budget_micros),
      monthly_runs: counts.monthlyRuns,
      monthly_run_limit: workspace.monthly_run_limit,
      concurrent_runs: counts.concurrentRuns,
      max_concurrent_runs: workspace.max_concurrent_runs,
      daily: daily.map((day) => ({ date: day.day, spend_usd: microsToUsd(day.spendMicros), runs: day.runs })),
      unpriced,
    };
  }
}
