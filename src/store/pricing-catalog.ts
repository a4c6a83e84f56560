/**
 * A new workspace's prices: every new workspace (the first start's and every registration's)
 * starts with the shipped catalog (src/money/shipped-catalog.ts reads it), so budgets count real
 * money out of the box. The entries are the catalog's (source `catalog`): a later import keeps
 * them current, and a price set by hand replaces them.
 */
import { decimalText } from '../money/decimal.js';
import type { Queryable } from './db.js';
import type { CatalogEntry } from './pricing.js';

/** Loads `entries` into a new workspace's prices (one statement, in the caller's transaction). */
export async function seedPricing(
  db: Queryable,
  workspaceId: string,
  entries: readonly CatalogEntry[],
  now: Date,
): Promise<void> {
  if (entries.length === 0) return;
  const optional = (price: number | null | undefined) =>
    price === null || price === undefined ? null : decimalText(price);
  await db.query(
    `INSERT INTO model_pricing (id, workspace_id, model, input_cost_per_token, output_cost_per_token,
       cache_read_input_cost_per_token, cache_write_input_cost_per_token, is_active, source, created_at, updated_at)
     SELECT gen_random_uuid(), $1, e.model, e.input::numeric, e.output::numeric, e.cache_read::numeric, e.cache_write::numeric,
       true, 'catalog', $3, $3
     FROM json_to_recordset($2::json) AS e(model text, input text, output text, cache_read text, cache_write text)
     ON CONFLICT (workspace_id, model) DO NOTHING`,
    [
      workspaceId,
      JSON.stringify(
        entries.map((entry) => ({
          model: entry.model,
          input: decimalText(entry.input_cost_per_token),
          output: decimalText(entry.output_cost_per_token),
          cache_read: optional(entry.cache_read_input_cost_per_token),
          cache_write: optional(entry.cache_write_input_cost_per_token),
        })),
      ),
      now,
    ],
  );
}
