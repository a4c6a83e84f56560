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
});

export const pricingCatalogRoutes: FastifyPluginAsync = async (base) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  app.get('/v1/model-pricing/catalog', {
    config: { auth: 'any' },
    schema: {
      tags: ['pricing'],
      summary: 'The list prices shipped with runguard (USD per token); import them with PUT /v1/model-pricing/{model}',
      response: {
        200: Type.Object({ taken_at: Nullable(Type.String()), source: Nullable(Type.String()), models: Type.Array(CatalogEntry) }),
        ...errorResponses(401, 404),
      },
    },
  }, async () => {
    let doc: { taken_at?: string; source?: string; models?: unknown[] };
    try {
      doc = JSON.parse(await readFile(CATALOG_URL, 'utf8')) as typeof doc;
    } catch {
      throw new ApiError('NOT_FOUND', 'This installation has no price catalog (config/pricing-catalog.json).');
    }
    return { taken_at: doc.taken_at ?? null, source: doc.source ?? null, models: (doc.models ?? []) as never[] };
  });
};
