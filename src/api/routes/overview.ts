/**
 * Today's aggregates the dashboard's overview shows beside `/v1/usage`: denials by reason, top
 * users and models by spend, unpriced model calls.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { OverviewReport } from '../../admin/overview-report.js';
import { errorResponses, Overview, OverviewQuery } from '../../contract/index.js';

export const overviewRoutes: FastifyPluginAsync<{ overview: OverviewReport }> = async (base, { overview }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/overview',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['usage'],
        summary: "Today's denials by reason, top users and models by spend, and unpriced model calls (UTC day)",
        querystring: OverviewQuery,
        response: { 200: Overview, ...errorResponses(401, 422) },
      },
    },
    async (request) => overview.read(request.principal.workspaceId, request.query.limit),
  );
};
