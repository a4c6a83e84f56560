/** Usage against budgets and limits, and billing as plan tiers (licence levels, no payments). */
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { BillingPlans } from '../../admin/billing-plans.js';
import type { ToolUsageReport } from '../../admin/tool-usage.js';
import type { UsageReport } from '../../admin/usage-report.js';
import { actorOf } from '../actor.js';
import { Billing, errorResponses, PlanChangeBody, ToolUsage, ToolUsageQuery, Usage, UsageQuery } from '../schemas.js';

export const usageRoutes: FastifyPluginAsync<{
  usage: UsageReport;
  tools: ToolUsageReport;
  billing: BillingPlans;
}> = async (base, { usage, tools, billing }) => {
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
    async (request) => usage.read(request.principal.workspaceId, request.query.days),
  );

  app.get(
    '/v1/tools/usage',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['usage'],
        summary: "Calls, denials, failures and spend per tool over a day (the workspace's local day; today by default)",
        querystring: ToolUsageQuery,
        response: { 200: ToolUsage, ...errorResponses(401, 422) },
      },
    },
    async (request) => tools.read(request.principal.workspaceId, request.query.date),
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
    async (request) => billing.read(request.principal.workspaceId),
  );

  app.post(
    '/v1/billing/plan',
    {
      config: { auth: 'jwt' },
      schema: {
        tags: ['billing'],
        summary: 'Move to another plan tier',
        body: PlanChangeBody,
        response: { 200: Billing, ...errorResponses(401, 409, 422) },
      },
    },
    async (request) => billing.change(actorOf(request.principal), request.principal.workspaceId, request.body.plan),
  );
};
