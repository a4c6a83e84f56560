/**
 * Today's aggregates the dashboard's overview shows beside `/v1/usage`: denials by reason, top
 * users and models by spend, unpriced model calls.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { microsToUsd, numericToUsd } from '../../money/decimal.js';
import type { Clock } from '../../clock.js';
import type { Db } from '../../store/db.js';
import { readOverview } from '../../store/overview.js';
import { errorResponses, Overview, OverviewQuery } from '../../contract/index.js';

export const overviewRoutes: FastifyPluginAsync<{ db: Db; clock: Clock }> = async (base, { db, clock }) => {
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
    async (request) => {
      const day = clock.now().toISOString().slice(0, 10);
      const o = await readOverview(db, request.principal.workspaceId, day, request.query.limit);
      return {
        date: day,
        denials_by_reason: o.denials,
        top_users: o.topUsers.map((u) => ({ user_id: u.userId, spend_usd: microsToUsd(u.spendMicros), runs: u.runs })),
        top_models: o.topModels.map((m) => ({
          model: m.model,
          spend_usd: numericToUsd(m.spendUsd) ?? 0,
          calls: m.calls,
          tokens: m.tokens,
        })),
        unpriced_calls: o.unpriced,
      };
    },
  );
};
