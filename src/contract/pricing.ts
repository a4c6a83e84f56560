/** Model pricing on the wire. */
import { Type, type Static } from 'typebox';
import { Nullable, Uuid } from './common.js';

export const ModelPricing = Type.Object({
  id: Uuid,
  model: Type.String(),
  input_cost_per_token: Type.Number(),
  output_cost_per_token: Type.Number(),
  /** `null`: cache reads cost the input price. */
  cache_read_input_cost_per_token: Nullable(Type.Number()),
  /** `null`: cache writes cost the input price. */
  cache_write_input_cost_per_token: Nullable(Type.Number()),
  is_active: Type.Boolean(),
  /** Who set the entry: `user` (PUT) or `catalog` (an import); an import keeps a user's entry. */
  source: Type.Enum(['user', 'catalog']),
});
export type ModelPricing = Static<typeof ModelPricing>;
