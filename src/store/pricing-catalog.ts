/**
 * A new workspace's prices: every new workspace (the first start's and every registration's)
 * starts with the shipped catalog (src/money/shipped-catalog.ts reads it), so budgets count real
 * money out of the box. The entries are the catalog's (source `catalog`): a later import keeps
 * them current, and a price set by hand replaces them.
 */
import type { Queryable } from './db.js';
import { PRICE_COLUMNS, PRICE_RECORD_COLUMNS, PRICE_RECORD_TYPES, priceRecord, type CatalogEntry } from './pricing.js';

/** Loads `entries` into a new workspace's prices (one statement, in the caller's transaction). */
export async function seedPricing(
  db: Queryable,
  workspaceId: string,
  entries: readonly CatalogEntry[],
  now: Date,
): Promise<void> {
  if (entries.length === 0) return;
  await db.query(
    `INSERT INTO model_pricing (id, workspace_id, model, ${PRICE_COLUMNS}, is_active, source, created_at, updated_at)
     SELECT gen_random_uuid(), $1, e.model, ${PRICE_RECORD_COLUMNS}, true, 'catalog', $3, $3
     FROM json_to_recordset($2::json) AS e(model text, ${PRICE_RECORD_TYPES})
     ON CONFLICT (workspace_id, model) DO NOTHING`,
    [workspaceId, JSON.stringify(entries.map((entry) => ({ model: entry.model, ...priceRecord(entry) }))), now],
  );
}
