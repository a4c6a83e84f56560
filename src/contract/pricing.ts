/** Model pricing on the wire. */
import { Type, type Static } from './typebox.js';
import { Nullable, Uuid } from './common.js';
import { MAX_TOKEN_COUNT } from './provider-usage.js';

/**
 * A model's long-context tier: a call whose prompt has more than `above_prompt_tokens` tokens
 * (every input token, cached or not) is priced, every token of it, at these prices instead.
 */
export const LongContextPricing = Type.Object({
  above_prompt_tokens: Type.Integer(),
  input_cost_per_token: Type.Number(),
  output_cost_per_token: Type.Number(),
  /** `null`: cache reads of such a call cost its input price. */
  cache_read_input_cost_per_token: Nullable(Type.Number()),
  /** `null`: cache writes of such a call cost its input price. */
  cache_write_input_cost_per_token: Nullable(Type.Number()),
});
export type LongContextPricing = Static<typeof LongContextPricing>;

export const ModelPricing = Type.Object({
  id: Uuid,
  model: Type.String(),
  input_cost_per_token: Type.Number(),
  output_cost_per_token: Type.Number(),
  /** `null`: cache reads cost the input price. */
  cache_read_input_cost_per_token: Nullable(Type.Number()),
  /** `null`: cache writes cost the input price. */
  cache_write_input_cost_per_token: Nullable(Type.Number()),
  /** `null`: one price whatever the prompt's length. */
  long_context: Nullable(LongContextPricing),
  is_active: Type.Boolean(),
  /** Who set the entry: `user` (PUT) or `catalog` (an import); an import keeps a user's entry. */
  source: Type.Enum(['user', 'catalog']),
});
export type ModelPricing = Static<typeof ModelPricing>;

/** Generous: a per-token price above $1 is almost surely a per-million figure typed as per-token. */
const PricePerToken = Type.Number({ minimum: 0, maximum: 1_000 });

const TierPrices = {
  input_cost_per_token: PricePerToken,
  output_cost_per_token: PricePerToken,
  cache_read_input_cost_per_token: Type.Optional(Nullable(PricePerToken)),
  cache_write_input_cost_per_token: Type.Optional(Nullable(PricePerToken)),
};

/** A long-context tier as PUT and import take it: cache prices null or absent: the tier's input price. */
const LongContextInput = Type.Object(
  { above_prompt_tokens: Type.Integer({ minimum: 0, maximum: MAX_TOKEN_COUNT }), ...TierPrices },
  { additionalProperties: false },
);

const Prices = {
  ...TierPrices,
  /** Null or absent: no long-context tier. */
  long_context: Type.Optional(Nullable(LongContextInput)),
  is_active: Type.Boolean({ default: true }),
};

const ModelName = Type.String({ minLength: 1, maxLength: 256 });

/** One model of an import: what it was, and what it is (or would be, in a dry run). */
export const PricingImportLine = Type.Object({
  model: Type.String(),
  change: Type.Enum(['new', 'changed', 'unchanged', 'kept']),
  before: Nullable(ModelPricing),
  after: Type.Object({ ...ModelPricing.properties, id: Nullable(Type.String()) }),
});

export const ModelParams = Type.Object({ model: ModelName });

/** `PUT /v1/model-pricing/:model`: USD per token; cache prices null or absent: the input price. */
export const PriceBody = Type.Object(Prices, { additionalProperties: false });
export type PriceBody = Static<typeof PriceBody>;

export const PricingImportBody = Type.Object(
  {
    models: Type.Array(Type.Object({ model: ModelName, ...Prices }, { additionalProperties: false }), {
      maxItems: 10_000,
    }),
    overwrite: Type.Boolean({ default: false }),
    dry_run: Type.Boolean({ default: false }),
  },
  { additionalProperties: false },
);
export type PricingImportBody = Static<typeof PricingImportBody>;

/** `POST /v1/model-pricing/import`'s answer. */
export const PricingImport = Type.Object({
  items: Type.Array(PricingImportLine),
  new: Type.Integer(),
  changed: Type.Integer(),
  unchanged: Type.Integer(),
  kept: Type.Integer(),
  dry_run: Type.Boolean(),
});
export type PricingImport = Static<typeof PricingImport>;

/** One model of the shipped price catalog, USD per token, as `POST /v1/model-pricing/import` takes it. */
export const PricingCatalogEntry = Type.Object({
  model: Type.String(),
  input_cost_per_token: Type.Number(),
  output_cost_per_token: Type.Number(),
  cache_read_input_cost_per_token: Type.Optional(Nullable(Type.Number())),
  cache_write_input_cost_per_token: Type.Optional(Nullable(Type.Number())),
  long_context: Type.Optional(
    Nullable(
      Type.Object({
        above_prompt_tokens: Type.Integer(),
        input_cost_per_token: Type.Number(),
        output_cost_per_token: Type.Number(),
        cache_read_input_cost_per_token: Type.Optional(Nullable(Type.Number())),
        cache_write_input_cost_per_token: Type.Optional(Nullable(Type.Number())),
      }),
    ),
  ),
});
export type PricingCatalogEntry = Static<typeof PricingCatalogEntry>;

/** `GET /v1/model-pricing/catalog`'s answer: the catalog shipped in `config/pricing-catalog.json`. */
export const PricingCatalog = Type.Object({
  taken_at: Nullable(Type.String()),
  // Where the prices come from, as the catalog file says it (a sentence, or a record of the source).
  source: Type.Unknown(),
  models: Type.Array(PricingCatalogEntry),
});
export type PricingCatalog = Static<typeof PricingCatalog>;
