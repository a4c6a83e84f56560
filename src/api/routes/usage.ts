/** Usage against budgets and limits, and billing as plan tiers (licence levels, no payments). */
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { BillingPlans } from '../../admin/billing-plans.js';
import { spendReportCsv, type SpendReports } from '../../admin/spend-report.js';
import type { ToolUsageReport } from '../../admin/tool-usage.js';
import type { UsageReport } from '../../admin/usage-report.js';
import { actorOf } from '../actor.js';
import {
  Billing,
  errorResponses,
  PlanChangeBody,
  SpendReport,
  SpendReportQuery,
  ToolUsage,
  ToolUsageQuery,
  Usage,
  UsageQuery,
} from '../schemas.js';

/** The weight an Accept header gives a media type (`type/subtype`), by its most specific range. */
function weight(accept: string, type: string): number {
  let best = { specificity: -1, q: 0 };
  for (const range of accept.split(',')) {
    const [name = '', ...params] = range.split(';').map((part) => part.trim().toLowerCase());
    const specificity = name === type ? 2 : name === `${type.split('/')[0]}/*` ? 1 : name === '*/*' ? 0 : -1;
    if (specificity <= best.specificity) continue;
    const quality = params.find((param) => param.startsWith('q='));
    best = { specificity, q: quality === undefined ? 1 : Number(quality.slice(2)) || 0 };
  }
  return best.q;
}

/** CSV when the caller weighs it above JSON (`Accept: text/csv`); JSON otherwise, and on a tie. */
export const prefersCsv = (accept: string | undefined): boolean =>
  accept !== undefined && weight(accept, 'text/csv') > weight(accept, 'application/json');

export const usageRoutes: FastifyPluginAsync<{
  usage: UsageReport;
  tools: ToolUsageReport;
  reports: SpendReports;
  billing: BillingPlans;
}> = async (base, { usage, tools, reports, billing }) => {
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
    '/v1/usage/report',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['usage'],
        summary: 'Spend between two local dates grouped by user, key, model or day; CSV with Accept: text/csv',
        querystring: SpendReportQuery,
        produces: ['application/json', 'text/csv'],
        response: {
          200: SpendReport,
          ...errorResponses(401, 422),
        },
      },
    },
    async (request, reply) => {
      const report = await reports.report(request.principal.workspaceId, request.query);
      if (!prefersCsv(request.headers.accept)) return report;
      // Bytes skip the JSON serializer; the schema documents the JSON form.
      return reply
        .type('text/csv; charset=utf-8')
        .header(
          'content-disposition',
          `attachment; filename="spend-${report.from}-${report.to}-${report.group_by}.csv"`,
        )
        .send(Buffer.from(spendReportCsv(report)) as never);
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
