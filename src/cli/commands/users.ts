/** `runguard users list|block|unblock|budget`: SDK users, their spend today, blocking and budgets. */
import { Argument, Command, Option } from 'commander';
import type { Page } from '../api-client.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { timestamp, usd } from '../output.js';
import { parseUsd, UNLIMITED } from './workspace.js';

interface User {
  user_id: string;
  blocked: boolean;
  daily_budget_usd: number | null;
  daily_spend_usd: number;
  run_count: number;
  first_seen_at: string;
  last_seen_at: string;
}

const path = (userId: string) => `/v1/users/${encodeURIComponent(userId)}`;

export function usersCommand(): Command {
  const users = new Command('users').description('SDK users: list, block, unblock, set a daily budget');
  users.addCommand(
    apiCommand('list', 'SDK users, most recently seen first')
      .addOption(new Option('--blocked', 'only blocked users'))
      .addOption(new Option('--page <n>', 'page').default('1'))
      .addOption(new Option('--per-page <n>', 'per page, at most 100').default('50'))
      .action(withApi(async ({ client, out }, o: ApiOptions & { blocked?: boolean; page: string; perPage: string }) => {
        const query = new URLSearchParams({ page: o.page, per_page: o.perPage });
        if (o.blocked) query.set('blocked', 'true');
        const page = await client.request<Page<User>>('GET', `/v1/users?${query}`);
        if (out.json) return out.data(page);
        out.table(['USER', 'BLOCKED', 'SPEND TODAY', 'DAILY BUDGET', 'RUNS', 'LAST SEEN'], page.items.map((u) => [
          u.user_id, u.blocked ? 'yes' : 'no', usd(u.daily_spend_usd), u.daily_budget_usd === null ? 'workspace default' : usd(u.daily_budget_usd),
          u.run_count, timestamp(u.last_seen_at),
        ]));
        out.line(`${page.items.length} of ${page.total} users (page ${page.page}).`);
      })),
  );
  for (const [name, blocked] of [['block', true], ['unblock', false]] as const) {
    users.addCommand(
      apiCommand(name, blocked ? 'deny every run start and step of a user (works before their first run)' : 'allow a user again')
        .addArgument(new Argument('<user_id>'))
        .action(withApi(async ({ client, out }, _o, userId: string) => {
          const user = await client.request<User>('PUT', path(userId), { blocked });
          if (out.json) return out.data(user);
          out.line(`${user.user_id} is ${user.blocked ? 'blocked' : 'allowed'}.`);
        })),
    );
  }
  users.addCommand(
    apiCommand('budget', "set a user's own daily budget in USD, or 'none' for the workspace's per-user budget")
      .addArgument(new Argument('<user_id>'))
      .addArgument(new Argument('<usd>', "USD per UTC day, or 'none'"))
      .action(withApi(async ({ client, out }, _o, userId: string, amount: string) => {
        const budget = parseUsd(amount, 'budget');
        const user = await client.request<User>('PUT', path(userId), { daily_budget_usd: budget === UNLIMITED ? null : budget });
        if (out.json) return out.data(user);
        out.line(`${user.user_id}: daily budget ${user.daily_budget_usd === null ? "the workspace's per-user budget" : usd(user.daily_budget_usd)}.`);
      })),
  );
  return users;
}
