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
import { errorResponses, Nullable } from '../schemas.js';

const PlanSchema = Type.Object({
  name: Type.String(),
  monthly_run_limit: Nullable(Type.Integer()),
  max_concurrent_runs: Nullable(Type.Integer()),
  kill_switch: Type.Boolean(),
});
const Billing = Type.Object({
  plan: Type.String(),
  limits: Type.Object({
    monthly_run_limit: Nullable(Type.Integer()),
    max_concurrent_runs: Nullable(Type.Integer()),
    kill_switch: Type.Boolean(),
  }),
  plans: Type.Array(PlanSchema),
});

function billingView(w: WorkspaceRow) {
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
        querystring: Type.Object({ days: Type.Integer({ minimum: 1, maximum: 366, default: 30 }) }),
        response: {
          200: Type.Object({
            date: Type.String(),
            workspace_daily_spend_usd: Type.Number(),
            workspace_daily_budget_usd: Nullable(Type.Number()),
            monthly_runs: Type.Integer(),
            monthly_run_limit: Nullable(Type.Integer()),
            concurrent_runs: Type.Integer(),
            max_concurrent_runs: Nullable(Type.Integer()),
            daily: Type.Array(Type.Object({ date: Type.String(), spend_usd: Type.Number(), runs: Type.Integer() })),
            /** Today's model calls recorded with tokens but no price (they count $0), by model. */
            unpriced: Type.Array(
              Type.Object({ model: Nullable(Type.String()), calls: Type.Integer(), tokens: Type.Integer() }),
            ),
          }),
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
