/** Model pricing: USD per token, per workspace. */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { GuardSettings } from '../../service/guard-settings.js';
import type { Db } from '../../store/db.js';
import { listActivePricing } from '../../store/pricing.js';
import { ModelPricing, Nullable, errorResponses } from '../schemas.js';
import { actorOf } from '../actor.js';

/** Generous: a per-token price above $1 is almost surely a per-million figure typed as per-token. */
const PricePerToken = Type.Number({ minimum: 0, maximum: 1_000 });

const Prices = {
  input_cost_per_token: PricePerToken,
  output_cost_per_token: PricePerToken,
  cache_read_input_cost_per_token: Type.Optional(Nullable(PricePerToken)),
  cache_write_input_cost_per_token: Type.Optional(Nullable(PricePerToken)),
  is_active: Type.Boolean({ default: true }),
};

const ModelName = Type.String({ minLength: 1, maxLength: 256 });

const ImportLine = Type.Object({
  model: Type.String(),
  change: Type.Enum(['new', 'changed', 'unchanged', 'kept']),
  before: Nullable(ModelPricing),
  after: Type.Object({ ...ModelPricing.properties, id: Nullable(Type.String()) }),
});

export const pricingRoutes: FastifyPluginAsync<{ db: Db; settings: GuardSettings }> = async (
  base,
  { db, settings },
) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/model-pricing',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['pricing'],
        summary: 'All active pricing entries',
        response: { 200: Type.Array(ModelPricing), ...errorResponses(401) },
      },
    },
    async (request) => listActivePricing(db, request.principal.workspaceId),
  );

  app.put(
    '/v1/model-pricing/:model',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['pricing'],
        summary: "Create or update a model's pricing (the entry becomes the user's: imports keep it)",
        params: Type.Object({ model: ModelName }),
        body: Type.Object(Prices, { additionalProperties: false }),
        response: { 200: ModelPricing, ...errorResponses(400, 401, 422) },
      },
    },
    async (request) =>
      settings.setPricing(
        actorOf(request.principal),
        request.principal.workspaceId,
        request.params.model,
        request.body,
      ),
  );

  app.post(
    '/v1/model-pricing/import',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['pricing'],
        summary:
          'Import catalog prices: new models are created, changed catalog entries replaced, entries set by hand kept unless `overwrite`',
        body: Type.Object(
          {
            models: Type.Array(Type.Object({ model: ModelName, ...Prices }, { additionalProperties: false }), {
              maxItems: 10_000,
            }),
            overwrite: Type.Boolean({ default: false }),
            dry_run: Type.Boolean({ default: false }),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            items: Type.Array(ImportLine),
            new: Type.Integer(),
            changed: Type.Integer(),
            unchanged: Type.Integer(),
            kept: Type.Integer(),
            dry_run: Type.Boolean(),
          }),
          ...errorResponses(400, 401, 413, 422),
        },
      },
    },
    async (request) => {
      const { models, overwrite, dry_run: dryRun } = request.body;
      const items = await settings.importPricing(actorOf(request.principal), request.principal.workspaceId, models, {
        overwrite,
        dryRun,
      });
      const count = (change: string) => items.filter((i) => i.change === change).length;
      return {
        items,
        new: count('new'),
        changed: count('changed'),
        unchanged: count('unchanged'),
        kept: count('kept'),
        dry_run: dryRun,
      };
    },
  );

  app.delete(
    '/v1/model-pricing/:model',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['pricing'],
        summary: "Delete a model's pricing entry (calls of the model are then priced as unknown)",
        params: Type.Object({ model: ModelName }),
        response: { 204: Type.Null(), ...errorResponses(401, 404) },
      },
    },
    async (request, reply) => {
      await settings.deletePricing(request.principal.workspaceId, request.params.model);
      return reply.status(204).send(null);
    },
  );
};
