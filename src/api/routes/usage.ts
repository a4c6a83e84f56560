/** Usage against budgets and limits, and billing as plan tiers (licence levels, no payments). */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { microsToUsd } from '../../money/decimal.js';
import type { Clock } from '../../clock.js';
import { planView } from '../../service/plans.js';
import { runCounts, scopeAt, type CounterStore } from '../../store/counters.js';
import type { Db } from '../../store/db.js';
import { unpricedUsage } from '../../store/unpriced-usage.js';
import { dailyUsage } from '../../store/users.js';
import type { GuardSettings } from '../../service/guard-settings.js';
import { PLAN_NAMES, type WorkspaceRow } from '../../store/workspaces.js';
import { actorOf } from '../actor.js';
import { Billing, errorResponses, Usage, UsageQuery } from '../schemas.js';

function billingView(w: WorkspaceRow): Billing {
  return {
    plan: w.plan,
    limits: {
      monthly_run_limit: w.monthly_run_limit,
      max_concurrent_runs: w.max_concurrent_runs,
      kill_switch: planView(w.plan).kill_switch,
    },
    plans: PLAN_NAMES.map(planView),
  };
}

export const usageRoutes: FastifyPluginAsync<{
  db: Db;
  counters: CounterStore;
  settings: GuardSettings;
  clock: Clock;
}> = async (base, { db, counters, settings, clock }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/usage',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['usage'],
        summary: "Today's spend against budgets, this month's runs, concurrent runs, and a daily series",
        querystring: UsageQuery,
        response: {
          200: Usage,
          ...errorResponses(401, 422),
        },
      },
    },
    async (request) => {
      const now = clock.now();
      const scope = scopeAt(now, request.principal.workspaceId, '');
      const [workspace, spend, counts, daily, unpriced] = await Promise.all([
        settings.workspace(scope.workspaceId),
        counters.readSpend(scope),
        runCounts(db, scope),
        dailyUsage(db, scope.workspaceId, scope.day, request.query.days),
        unpricedUsage(db, scope.workspaceId, scope.day),
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
        daily: daily.map((d) => ({ date: d.day, spend_usd: microsToUsd(d.spendMicros), runs: d.runs })),
        unpriced,
      };
    },
  );

  app.get(
    '/v1/billing',
    {
      config: { auth: 'jwt' },
      schema: {
        tags: ['billing'],
        summary: 'The plan, its limits, and the tiers',
        response: { 200: Billing, ...errorResponses(401) },
      },
    },
    async (request) => billingView(await settings.workspace(request.principal.workspaceId)),
  );

  app.post(
    '/v1/billing/plan',
    {
      config: { auth: 'jwt' },
      schema: {
        tags: ['billing'],
        summary: 'Move to another plan tier',
        body: Type.Object({ plan: Type.Enum(PLAN_NAMES) }, { additionalProperties: false }),
        response: { 200: Billing, ...errorResponses(401, 409, 422) },
      },
    },
    async (request) => {
      return billingView(
        await settings.changePlan(actorOf(request.principal), request.principal.workspaceId, request.body.plan),
      );
    },
  );
};
