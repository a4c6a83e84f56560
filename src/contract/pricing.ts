/** Model pricing on the wire. */
import { Type, type Static } from 'typebox';
import { Uuid } from './common.js';

export const ModelPricing = Type.Object({
  id: Uuid,
  model: Type.String(),
  input_cost_per_token: Type.Number(),
  output_cost_per_token: Type.Number(),
  is_active: Type.Boolean(),
});
export type ModelPricing = Static<typeof ModelPricing>;
