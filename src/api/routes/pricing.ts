/** Model pricing: USD per token, per workspace. */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Clock } from '../../clock.js';
import type { Db } from '../../store/db.js';
import { listActivePricing, upsertPricing } from '../../store/pricing.js';
import { ModelPricing, errorResponses } from '../schemas.js';

/** Generous: a per-token price above $1 is almost surely a per-million figure typed as per-token. */
const PricePerToken = Type.Number({ minimum: 0, maximum: 1_000 });

export const pricingRoutes: FastifyPluginAsync<{ db: Db; clock: Clock }> = async (base, { db, clock }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.get('/v1/model-pricing', {
    config: { auth: 'any' },
    schema: { tags: ['pricing'], summary: 'All active pricing entries', response: { 200: Type.Array(ModelPricing), ...errorResponses(401) } },
  }, async (request) => listActivePricing(db, request.principal.workspaceId));

  app.put('/v1/model-pricing/:model', {
    config: { auth: 'any' },
    schema: {
      tags: ['pricing'],
      summary: "Create or update a model's pricing",
      params: Type.Object({ model: Type.String({ minLength: 1, maxLength: 256 }) }),
      body: Type.Object(
        {
          input_cost_per_token: PricePerToken,
          output_cost_per_token: PricePerToken,
          is_active: Type.Boolean({ default: true }),
        },
        { additionalProperties: false },
      ),
      response: { 200: ModelPricing, ...errorResponses(400, 401, 422) },
    },
  }, async (request) =>
    upsertPricing(db, request.principal.workspaceId, request.params.model, request.body, clock.now()));
};
