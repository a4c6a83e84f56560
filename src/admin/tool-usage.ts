/** Calls, denials, failures and spend per tool over one local day of the workspace. */
import type { Clock } from '../clock.js';
import type { ToolUsage } from '../contract/index.js';
import { numericToUsd } from '../money/decimal.js';
import { addDays, localDay, startOfLocalDate } from '../periods.js';
import type { Db } from '../store/db.js';
import { toolUsage } from '../store/tool-usage.js';
import type { GuardSettings } from './guard-settings.js';

export class ToolUsageReport {
  constructor(
    private readonly db: Db,
    private readonly settings: GuardSettings,
    private readonly clock: Clock,
  ) {}

  /** `date`: a local date in the workspace's zone; today's when left out. */
  async read(workspaceId: string, date: string | undefined): Promise<ToolUsage> {
    const { time_zone: timeZone } = await this.settings.workspace(workspaceId);
    const day = date ?? localDay(this.clock.now(), timeZone).day;
    const start = new Date(startOfLocalDate(day, timeZone));
    const end = new Date(startOfLocalDate(addDays(day, 1), timeZone));
    const rows = await toolUsage(this.db, workspaceId, start, end);
    return {
      date: day,
      rows: rows.map(({ spend, ...counts }) => ({ ...counts, spend_usd: numericToUsd(spend) ?? 0 })),
    };
  }
}
