/**
 * Today's aggregates the dashboard's overview shows beside `/v1/usage`: denials by reason, top
 * users and models by spend, unpriced model calls.
 */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { microsToUsd, numericToUsd } from '../../money/decimal.js';
import type { Clock } from '../../service/guard-service.js';
import type { Db } from '../../store/db.js';
import { readOverview } from '../../store/overview.js';
import { errorResponses } from '../schemas.js';

const Count = Type.Integer({ minimum: 0 });

export const overviewRoutes: FastifyPluginAsync<{ db: Db; clock: Clock }> = async (base, { db, clock }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.get('/v1/overview', {
    config: { auth: 'any' },
    schema: {
      tags: ['usage'],
      summary: "Today's denials by reason, top users and models by spend, and unpriced model calls (UTC day)",
      querystring: Type.Object({ limit: Type.Integer({ minimum: 1, maximum: 100, default: 10 }) }),
      response: {
        200: Type.Object({
          date: Type.String(),
          denials_by_reason: Type.Array(Type.Object({ reason: Type.String(), count: Count })),
          top_users: Type.Array(Type.Object({ user_id: Type.String(), spend_usd: Type.Number(), runs: Count })),
          top_models: Type.Array(Type.Object({ model: Type.String(), spend_usd: Type.Number(), calls: Count, tokens: Count })),
          unpriced_calls: Type.Array(Type.Object({ model: Type.String(), calls: Count, tokens: Count })),
        }),
        ...errorResponses(401, 422),
      },
    },
  }, async (request) => {
    const day = clock.now().toISOString().slice(0, 10);
    const o = await readOverview(db, request.principal.workspaceId, day, request.query.limit);
    return {
      date: day,
      denials_by_reason: o.denials,
      top_users: o.topUsers.map((u) => ({ user_id: u.userId, spend_usd: microsToUsd(u.spendMicros), runs: u.runs })),
      top_models: o.topModels.map((m) => ({ model: m.model, spend_usd: numericToUsd(m.spendUsd) ?? 0, calls: m.calls, tokens: m.tokens })),
      unpriced_calls: o.unpriced,
    };
  });
};
