/** `runguard budgets add|list|remove`: the workspace's budgets of `/v1/budgets` (rule 13). */
import { Argument, Command, Option } from 'commander';
import type { Budget } from '../../contract/index.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { timestamp } from '../output.js';

interface AddOptions extends ApiOptions {
  scope: string;
  subject?: string;
  period: string;
  limit: string;
  alert?: boolean;
}

export function budgetsCommand(): Command {
  const budgets = new Command('budgets').description(
    'budgets per workspace, key, tag or user, per day, week or month (`budget set` keeps the daily ones)',
  );
  budgets.addCommand(
    apiCommand('list', 'each budget with its spend this period and when it resets').action(
      withApi(async ({ client, out }) => {
        const list = await client.request<Budget[]>('GET', '/v1/budgets');
        if (out.json) return out.data(list);
        out.table(
          ['ID', 'SCOPE', 'SUBJECT', 'PERIOD', 'SPEND', 'LIMIT', 'ACTION', 'RESETS'],
          list.map((budget) => [
            budget.id,
            budget.scope,
            budget.subject ?? '',
            budget.period,
            `$${budget.spend_usd}`,
            `$${budget.limit_usd}`,
            budget.action,
            timestamp(budget.resets_at),
          ]),
        );
      }),
    ),
  );
  budgets.addCommand(
    apiCommand('add', 'add a budget: e.g. --scope user --subject ana --period week --limit 5')
      .addOption(
        new Option('--scope <scope>', 'whose spend').choices(['workspace', 'user', 'key', 'tag']).makeOptionMandatory(),
      )
      .option('--subject <subject>', 'the user id, the API key id, or the tag pair name:value (none for the workspace)')
      .addOption(new Option('--period <period>', 'the window').choices(['day', 'week', 'month']).makeOptionMandatory())
      .requiredOption('--limit <usd>', 'the cap in USD')
      .option('--alert', 'only warn (budget.threshold events), never deny')
      .action(
        withApi(async ({ client, out }, options: AddOptions) => {
          const limit = Number(options.limit);
          if (!Number.isFinite(limit)) throw new Error(`--limit must be a number of USD, not "${options.limit}"`);
          const budget = await client.request<Budget>('POST', '/v1/budgets', {
            scope: options.scope,
            ...(options.subject !== undefined && { subject: options.subject }),
            period: options.period,
            limit_usd: limit,
            action: options.alert ? 'alert' : 'deny',
          });
          if (out.json) return out.data(budget);
          out.line(
            `Budget ${budget.id}: ${budget.scope}${budget.subject ? ` ${budget.subject}` : ''} $${budget.limit_usd} a ${budget.period} (${budget.action}); spent $${budget.spend_usd}, resets ${timestamp(budget.resets_at)}.`,
          );
        }),
      ),
  );
  budgets.addCommand(
    apiCommand('remove', 'remove a budget by its id (`budgets list` shows ids)')
      .addArgument(new Argument('<id>', 'the budget id'))
      .action(
        withApi(async ({ client, out }, _options: ApiOptions, id: string) => {
          await client.request('DELETE', `/v1/budgets/${encodeURIComponent(id)}`);
          if (out.json) return out.data({ id, removed: true });
          out.line(`Budget ${id} is removed: it stops applying at the next decision.`);
        }),
      ),
  );
  return budgets;
}
