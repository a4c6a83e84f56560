/** `runguard users list|block|unblock|budget|delete`: SDK users, their spend today, blocking and budgets. */
import { Argument, Command, Option } from 'commander';
import type { Page, SdkUser, UserDeletion, Workspace } from '../../contract/index.js';
import type { ApiClient } from '../api-client.js';
import { CliError } from '../errors.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { pageFooter, timestamp, usd } from '../output.js';
import { parseUsd, UNLIMITED } from './workspace.js';

const path = (userId: string) => `/v1/users/${encodeURIComponent(userId)}`;

/**
 * Whether a user is blocked, read from the blocked users only (few, as a rule): the API has no
 * read of one user, and a PUT would create a user never seen.
 */
async function isBlocked(client: ApiClient, userId: string): Promise<boolean> {
  for (let page = 1; ; page++) {
    const blocked = await client.request<Page<SdkUser>>('GET', `/v1/users?blocked=true&per_page=100&page=${page}`);
    if (blocked.items.some((user) => user.user_id === userId)) return true;
    if (page * blocked.per_page >= blocked.total || blocked.items.length === 0) return false;
  }
}

export function usersCommand(): Command {
  const users = new Command('users').description('SDK users: list, block, unblock, set a daily budget');
  users.addCommand(
    apiCommand('list', 'SDK users, most recently seen first')
      .addOption(new Option('--blocked', 'only blocked users'))
      .addOption(new Option('--page <n>', 'page').default('1'))
      .addOption(new Option('--per-page <n>', 'per page, at most 100').default('50'))
      .action(
        withApi(async ({ client, out }, options: ApiOptions & { blocked?: boolean; page: string; perPage: string }) => {
          const query = new URLSearchParams({ page: options.page, per_page: options.perPage });
          if (options.blocked) query.set('blocked', 'true');
          const page = await client.request<Page<SdkUser>>('GET', `/v1/users?${query}`);
          if (out.json) return out.data(page);
          if (page.total === 0) return out.line(options.blocked ? 'No blocked users.' : 'No users yet.');
          out.table(
            ['USER', 'BLOCKED', 'SPEND TODAY', 'DAILY BUDGET', 'RUNS', 'LAST SEEN'],
            page.items.map((user) => [
              user.user_id,
              user.blocked ? out.style.bad('yes') : 'no',
              usd(user.daily_spend_usd),
              user.daily_budget_usd === null ? 'workspace default' : usd(user.daily_budget_usd),
              user.run_count,
              timestamp(user.last_seen_at),
            ]),
          );
          out.line(`\n${pageFooter(page, 'user')}`);
        }),
      ),
  );
  users.addCommand(
    apiCommand('block', 'deny every run start and step of a user (works before their first run)')
      .addArgument(new Argument('<user_id>'))
      .action(
        withApi(async ({ client, out }, _o, userId: string) => {
          const user = await client.request<SdkUser>('PUT', path(userId), { blocked: true });
          if (out.json) return out.data(user);
          out.line(`${user.user_id} is ${out.style.bad('blocked')}.`);
        }),
      ),
  );
  users.addCommand(
    apiCommand('unblock', 'allow a blocked user again')
      .addArgument(new Argument('<user_id>'))
      .action(
        withApi(async ({ client, out }, _o, userId: string) => {
          // Unblocking someone not blocked changes nothing, and must not create a user never seen.
          if (!(await isBlocked(client, userId))) {
            if (out.json) return out.data({ user_id: userId, blocked: false, changed: false });
            return out.line(`${userId} is not blocked; nothing changed.`);
          }
          const user = await client.request<SdkUser>('PUT', path(userId), { blocked: false });
          if (out.json) return out.data(user);
          out.line(`${user.user_id} is allowed again.`);
        }),
      ),
  );
  users.addCommand(
    apiCommand('budget', "set a user's own daily budget in USD, or 'none' for the workspace's per-user budget")
      .addArgument(new Argument('<user_id>'))
      .addArgument(new Argument('<usd>', "USD per UTC day, or 'none'"))
      .action(
        withApi(async ({ client, out }, _o, userId: string, amount: string) => {
          const budget = parseUsd(amount, 'budget');
          const user = await client.request<SdkUser>('PUT', path(userId), {
            daily_budget_usd: budget === UNLIMITED ? null : budget,
          });
          if (out.json) return out.data(user);
          if (user.daily_budget_usd !== null) {
            if (user.daily_budget_usd === 0)
              out.warn(`a budget of $0.00 denies every run and call of ${user.user_id}.`);
            return out.line(
              `${user.user_id}: daily budget ${usd(user.daily_budget_usd)} (spent today: ${usd(user.daily_spend_usd)}).`,
            );
          }
          const workspace = await client.request<Workspace>('GET', '/v1/workspace');
          const shared =
            workspace.user_daily_budget_usd === null ? 'unlimited' : `${usd(workspace.user_daily_budget_usd)} a day`;
          out.line(`${user.user_id}: no budget of their own; the workspace's per-user budget applies (${shared}).`);
        }),
      ),
  );
  users.addCommand(
    apiCommand(
      'delete',
      "delete a user's record and ended runs (refused while a run is RUNNING or in this month / since yesterday, UTC)",
    )
      .addArgument(new Argument('<user_id>'))
      .addOption(new Option('--yes', 'confirm: their runs and steps are deleted for good'))
      .action(
        withApi(async ({ client, out }, options: ApiOptions & { yes?: boolean }, userId: string) => {
          if (!options.yes)
            throw new CliError(`deleting ${userId} deletes their runs and steps for good; run again with --yes`);
          const deleted = await client.request<UserDeletion>('DELETE', path(userId));
          if (out.json) return out.data(deleted);
          out.line(
            `Deleted ${deleted.user_id} and ${deleted.runs_deleted} run${deleted.runs_deleted === 1 ? '' : 's'}.`,
          );
        }),
      ),
  );
  return users;
}
