/** The price catalog shipped in `config/pricing-catalog.json`, for the dashboard's import. */
import { readFile } from 'node:fs/promises';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ApiError } from '../../errors.js';
import { errorResponses, PricingCatalog } from '../schemas.js';

/** From `dist/api/routes/` (or `src/api/routes/`), the package's `config/`. */
const CATALOG_URL = new URL('../../../config/pricing-catalog.json', import.meta.url);

export const pricingCatalogRoutes: FastifyPluginAsync = async (base) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/v1/model-pricing/catalog',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['pricing'],
        summary: 'The list prices shipped with runguard (USD per token), as POST /v1/model-pricing/import takes them',
        response: {
          200: PricingCatalog,
          ...errorResponses(401, 404),
        },
      },
    },
    async () => {
      // The shipped file, taken to have the answer's shape (not checked here): the schema serializes it.
      let doc: Partial<PricingCatalog>;
      try {
        doc = JSON.parse(await readFile(CATALOG_URL, 'utf8')) as typeof doc;
      } catch {
        throw new ApiError('NOT_FOUND', 'This installation has no price catalog (config/pricing-catalog.json).');
      }
      return { taken_at: doc.taken_at ?? null, source: doc.source ?? null, models: doc.models ?? [] };
    },
  );
};
