/** Model pricing: USD per token, per workspace. */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { GuardSettings } from '../../service/guard-settings.js';
import type { Db } from '../../store/db.js';
import { listActivePricing } from '../../store/pricing.js';
import { errorResponses, ModelParams, ModelPricing, PriceBody, PricingImport, PricingImportBody } from '../schemas.js';
import { actorOf } from '../actor.js';

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
        params: ModelParams,
        body: PriceBody,
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
        body: PricingImportBody,
        response: { 200: PricingImport, ...errorResponses(400, 401, 413, 422) },
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
        params: ModelParams,
        response: { 204: Type.Null(), ...errorResponses(401, 404) },
      },
    },
    async (request, reply) => {
      await settings.deletePricing(request.principal.workspaceId, request.params.model);
      return reply.status(204).send(null);
    },
  );
};
