/** The price catalog shipped in `config/pricing-catalog.json`, for the dashboard's import. */
import { readFile } from 'node:fs/promises';
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ApiError } from '../../errors.js';
import { errorResponses, Nullable } from '../schemas.js';

/** From `dist/api/routes/` (or `src/api/routes/`), the package's `config/`. */
const CATALOG_URL = new URL('../../../config/pricing-catalog.json', import.meta.url);

const CatalogEntry = Type.Object({
  model: Type.String(),
  input_cost_per_token: Type.Number(),
  output_cost_per_token: Type.Number(),
  cache_read_input_cost_per_token: Type.Optional(Nullable(Type.Number())),
  cache_write_input_cost_per_token: Type.Optional(Nullable(Type.Number())),
});

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
          200: Type.Object({
            taken_at: Nullable(Type.String()),
            // Where the prices come from, as the catalog file says it (a sentence, or a record of the source).
            source: Type.Unknown(),
            models: Type.Array(CatalogEntry),
          }),
          ...errorResponses(401, 404),
        },
      },
    },
    async () => {
      let doc: { taken_at?: string; source?: unknown; models?: unknown[] };
      try {
        doc = JSON.parse(await readFile(CATALOG_URL, 'utf8')) as typeof doc;
      } catch {
        throw new ApiError('NOT_FOUND', 'This installation has no price catalog (config/pricing-catalog.json).');
      }
      return { taken_at: doc.taken_at ?? null, source: doc.source ?? null, models: (doc.models ?? []) as never[] };
    },
  );
};
