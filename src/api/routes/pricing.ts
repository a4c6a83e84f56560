/** Model pricing: USD per token, per workspace. */
import { Type } from '../../contract/typebox.js';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { PricingTable } from '../../admin/pricing-table.js';
import { errorResponses, ModelParams, ModelPricing, PriceBody, PricingImport, PricingImportBody } from '../schemas.js';
import { actorOf } from '../actor.js';

export const pricingRoutes: FastifyPluginAsync<{ pricing: PricingTable }> = async (base, { pricing }) => {
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
    async (request) => pricing.list(request.principal.workspaceId),
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
      pricing.set(actorOf(request.principal), request.principal.workspaceId, request.params.model, request.body),
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
    async (request) => pricing.import(actorOf(request.principal), request.principal.workspaceId, request.body),
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
      await pricing.delete(request.principal.workspaceId, request.params.model);
      return reply.status(204).send(null);
    },
  );
};
