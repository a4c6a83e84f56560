/** `/health` on the wire: the daemon, its database and its counter store (503 with the same body). */
import { Type, type Static } from './typebox.js';

const Check = Type.Enum(['ok', 'unavailable']);

export const Health = Type.Object({
  status: Type.Enum(['ok', 'unavailable']),
  version: Type.String(),
  checks: Type.Object({ database: Check, counters: Check }),
  counter_store: Type.String(),
  detail: Type.Optional(Type.String()),
  code: Type.Optional(Type.String()),
});
export type Health = Static<typeof Health>;
