/** `runguard budget set` and `runguard limits set`: the workspace's budgets and run limits. */
import { Command, InvalidArgumentError, Option } from 'commander';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { usd } from '../output.js';

interface Workspace {
  plan: string;
  daily_budget_usd: number | null;
  user_daily_budget_usd: number | null;
  monthly_run_limit: number | null;
  max_concurrent_runs: number | null;
}

/**
 * Commander keeps no null from a parser, so options hold this marker for "no limit" and the
 * request body turns it into the API's null.
 */
export const UNLIMITED = 'unlimited';
const orNull = (value: unknown) => (value === UNLIMITED ? null : value);

/** `none` (or `unlimited`) is no budget; otherwise a non-negative amount. */
export function parseUsd(text: string, what: string): number | typeof UNLIMITED {
  if (/^(none|unlimited)$/i.test(text)) return UNLIMITED;
  const value = Number(text.replace(/^\$/, ''));
  if (!/^\$?\d+(\.\d+)?$/.test(text) || !Number.isFinite(value)) {
    throw new InvalidArgumentError(`${what} must be an amount in USD like 12.50, or 'none'.`);
  }
  return value;
}

function parseLimit(text: string): number | typeof UNLIMITED {
  if (/^(none|unlimited)$/i.test(text)) return UNLIMITED;
  if (!/^\d+$/.test(text)) throw new InvalidArgumentError("must be a whole number, or 'none'.");
  return Number(text);
}

const show = (w: Workspace) => [
  ['workspace daily budget', w.daily_budget_usd === null ? 'unlimited' : usd(w.daily_budget_usd)],
  ['per-user daily budget', w.user_daily_budget_usd === null ? 'unlimited' : usd(w.user_daily_budget_usd)],
  ['monthly runs', w.monthly_run_limit ?? 'unlimited'],
  ['concurrent runs', w.max_concurrent_runs ?? 'unlimited'],
];

function setter(name: string, description: string, options: Option[], body: (o: Record<string, unknown>) => Record<string, unknown>) {
  const command = apiCommand('set', description);
  for (const option of options) command.addOption(option);
  return new Command(name).description(description).addCommand(
    command.action(withApi(async ({ client, out }, o: ApiOptions & Record<string, unknown>) => {
      const changes = body(o);
      if (Object.keys(changes).length === 0) throw new InvalidArgumentError(`nothing to set: give at least one of ${options.map((x) => x.long).join(', ')}`);
      const workspace = await client.request<Workspace>('PATCH', '/v1/workspace', changes);
      if (out.json) return out.data(workspace);
      out.table(['', ''], show(workspace));
    })),
  );
}

export function budgetCommand(): Command {
  return setter('budget', "set the workspace's daily budgets in USD ('none' = unlimited)", [
    new Option('--workspace-daily <usd>', 'USD per UTC day for the whole workspace').argParser((v) => parseUsd(v, '--workspace-daily')),
    new Option('--user-daily <usd>', 'USD per UTC day for each user without a budget of their own').argParser((v) => parseUsd(v, '--user-daily')),
  ], (o) => ({
    ...(o.workspaceDaily !== undefined && { daily_budget_usd: orNull(o.workspaceDaily) }),
    ...(o.userDaily !== undefined && { user_daily_budget_usd: orNull(o.userDaily) }),
  }));
}

export function limitsCommand(): Command {
  return setter('limits', "set the monthly run limit and the concurrent run limit ('none' = unlimited, within the plan)", [
    new Option('--monthly-runs <n>', 'allowed run starts per UTC month').argParser(parseLimit),
    new Option('--concurrent-runs <n>', 'RUNNING runs at once').argParser(parseLimit),
  ], (o) => ({
    ...(o.monthlyRuns !== undefined && { monthly_run_limit: orNull(o.monthlyRuns) }),
    ...(o.concurrentRuns !== undefined && { max_concurrent_runs: orNull(o.concurrentRuns) }),
  }));
}
