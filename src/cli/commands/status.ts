/** `runguard status`: the daemon's health, the kill switch, and today's usage against the limits. */
import type { Budget, Health, UpstreamProvider, Usage, Workspace } from '../../contract/index.js';
import { apiCommand, withApi } from '../command.js';
import { timestamp, usd } from '../output.js';
import { budgetRows, limitRows } from './workspace.js';

const of = (value: number | string, limit: number | string | null) => `${value} of ${limit ?? 'unlimited'}`;

/** A budget of `/v1/budgets` as one row: whose, which period, this period's spend, what it does, when it resets. */
const budgetRow = (budget: Budget): [string, string] => [
  `budget ${budget.scope}${budget.subject === null ? '' : ` ${budget.subject}`} ${budget.period}`,
  `${of(usd(budget.spend_usd), usd(budget.limit_usd))} (${budget.action}); resets ${timestamp(budget.resets_at)}`,
];

export function statusCommand() {
  return apiCommand(
    'status',
    "health, kill switch, today's spend against budgets, each budget this period, runs this month, concurrent runs",
  ).action(
    withApi(async ({ client, out }) => {
      // /health answers 503 with the same body when something is down: read it either way.
      const healthResponse = await fetch(`${client.url}/health`).catch(() => null);
      const health = (healthResponse ? await healthResponse.json().catch(() => null) : null) as Health | null;
      const [workspace, usage, providers, budgets] = await Promise.all([
        client.request<Workspace>('GET', '/v1/workspace'),
        client.request<Usage>('GET', '/v1/usage?days=1'),
        // A daemon without the proxy (or an older one) has none to show.
        client.request<UpstreamProvider[]>('GET', '/v1/providers').catch(() => null),
        // An older daemon has no budgets of /v1/budgets.
        client.request<Budget[]>('GET', '/v1/budgets').catch(() => null),
      ]);
      if (out.json) return out.data({ health, workspace, usage, budgets, providers });
      out.table(
        ['', ''],
        [
          [
            'daemon',
            health
              ? `${health.status === 'ok' ? health.status : out.style.bad(health.status)} (v${health.version}; database ${health.checks.database}, counters ${health.checks.counters} [${health.counter_store}])`
              : 'unreachable',
          ],
          ['workspace', `${workspace.name} (${workspace.plan} plan)`],
          ['kill switch', workspace.kill_switch_active ? out.style.bad('ON: everything is denied') : 'off'],
          [
            `spend ${usage.date}`,
            of(
              usd(usage.workspace_daily_spend_usd),
              usage.workspace_daily_budget_usd === null ? null : usd(usage.workspace_daily_budget_usd),
            ),
          ],
          ['runs this month', of(usage.monthly_runs, usage.monthly_run_limit)],
          ['concurrent runs', of(usage.concurrent_runs, usage.max_concurrent_runs)],
          // Every other guard, as `budget` and `limits` show them.
          ...budgetRows(workspace).filter(([name]) => name !== 'workspace daily budget'),
          ...limitRows(workspace).filter(([name]) => name !== 'monthly runs' && name !== 'concurrent runs'),
          ...(budgets ?? []).map(budgetRow),
          // Where the proxy forwards, and what sets it: the first thing to check when a call fails.
          ...(providers ?? []).map((provider): [string, string] => [
            `upstream ${provider.name}`,
            `${provider.upstream}${provider.set_by ? ` (${provider.set_by})` : ''}`,
          ]),
        ],
      );
    }),
  );
}
