/**
 * SDK users as the API shows them: listed with today's spend, blocked or budgeted through
 * GuardSettings (the only writer of what a decision reads), in USD on the wire and microdollars below it.
 */
import type { Page, SdkUser, SdkUserListQuery, SdkUserUpdateBody, UserDeletion } from '../contract/index.js';
import { microsToUsd, usdToMicros } from '../money/decimal.js';
import type { Clock } from '../clock.js';
import type { Db } from '../store/db.js';
import { listUsers, type SdkUserRow } from '../store/users.js';
import type { GuardSettings } from './guard-settings.js';
import { localDay } from '../periods.js';
import { workspaceTimeZone } from '../store/workspaces.js';
import type { Actor } from '../webhooks/webhook-events.js';

export function sdkUserView(user: SdkUserRow): SdkUser {
  return {
    user_id: user.user_id,
    blocked: user.blocked,
    daily_budget_usd: user.daily_budget_micros === null ? null : microsToUsd(user.daily_budget_micros),
    daily_spend_usd: microsToUsd(user.daily_spend_micros),
    run_count: user.run_count,
    first_seen_at: new Date(user.first_seen_at).toISOString(),
    last_seen_at: new Date(user.last_seen_at).toISOString(),
  };
}

export class SdkUsers {
  constructor(
    private readonly db: Db,
    private readonly settings: GuardSettings,
    private readonly clock: Clock,
  ) {}

  /** A page of the workspace's users, most recently seen first, with today's spend (the workspace's local day). */
  async list(workspaceId: string, query: SdkUserListQuery): Promise<Page<SdkUser>> {
    const { day } = localDay(this.clock.now(), await workspaceTimeZone(this.db, workspaceId));
    const { items, total } = await listUsers(this.db, workspaceId, day, {
      blocked: query.blocked ?? null,
      search: query.search ?? null,
      page: query.page,
      perPage: query.per_page,
    });
    return { items: items.map(sdkUserView), total, page: query.page, per_page: query.per_page };
  }

  /** Blocks, unblocks or budgets a user (one never seen is created); what the body leaves out stays. */
  async update(actor: Actor, workspaceId: string, userId: string, body: SdkUserUpdateBody): Promise<SdkUser> {
    const budget = body.daily_budget_usd;
    const user = await this.settings.updateUser(actor, workspaceId, userId, {
      blocked: body.blocked,
      daily_budget_micros: budget === undefined ? undefined : budget === null ? null : usdToMicros(budget),
    });
    return sdkUserView(user);
  }

  /** Deletes a user's record and ended runs; refused while a run of theirs still counts. */
  delete(workspaceId: string, userId: string): Promise<UserDeletion> {
    return this.settings.deleteUser(workspaceId, userId);
  }
}
