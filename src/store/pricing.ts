/** Per-workspace model pricing: USD per token, stored as exact NUMERIC. */
import { randomUUID } from 'node:crypto';
import { formatDecimal, parseDecimal, type LongContextEntry } from '../money/cost.js';
import { decimalText, numericToUsd } from '../money/decimal.js';
import type { ModelPricing } from '../contract/pricing.js';
import type { Db, Queryable } from './db.js';

export type { ModelPricing };

/** Who set an entry: a person (a PUT) or an import of a catalog, which never overwrites a person's entry unasked. */
export type PricingSource = ModelPricing['source'];

/** A row's long-context tier, or null when it has none. */
function longContextOf(row: Record<string, unknown>): ModelPricing['long_context'] {
  if (row.long_context_above_tokens === null || row.long_context_above_tokens === undefined) return null;
  return {
    above_prompt_tokens: Number(row.long_context_above_tokens),
    input_cost_per_token: numericToUsd(row.long_input_cost_per_token as string)!,
    output_cost_per_token: numericToUsd(row.long_output_cost_per_token as string)!,
    cache_read_input_cost_per_token: numericToUsd((row.long_cache_read_input_cost_per_token ?? null) as string | null),
    cache_write_input_cost_per_token: numericToUsd(
      (row.long_cache_write_input_cost_per_token ?? null) as string | null,
    ),
  };
}

function toPricing(row: Record<string, unknown>): ModelPricing {
  return {
    id: String(row.id),
    model: String(row.model),
    input_cost_per_token: numericToUsd(row.input_cost_per_token as string)!,
    output_cost_per_token: numericToUsd(row.output_cost_per_token as string)!,
    cache_read_input_cost_per_token: numericToUsd((row.cache_read_input_cost_per_token ?? null) as string | null),
    cache_write_input_cost_per_token: numericToUsd((row.cache_write_input_cost_per_token ?? null) as string | null),
    long_context: longContextOf(row),
    is_active: Boolean(row.is_active),
    source: row.source === 'catalog' ? 'catalog' : 'user',
  };
}

export async function listActivePricing(db: Queryable, workspaceId: string): Promise<ModelPricing[]> {
  const { rows } = await db.query('SELECT * FROM model_pricing WHERE workspace_id = $1 AND is_active ORDER BY model', [
    workspaceId,
  ]);
  return rows.map(toPricing);
}

/** A model's active prices as exact decimal text (Postgres's numeric output), cache prices null when unset. */
export interface ActivePriceRow {
  input: string;
  output: string;
  cache_read: string | null;
  cache_write: string | null;
  /** The long-context tier: its threshold (bigint text) and prices, all null when it has none. */
  long_above: string | null;
  long_input: string | null;
  long_output: string | null;
  long_cache_read: string | null;
  long_cache_write: string | null;
}

/** The workspace's active prices for `model`; null when it has none (an unpriced model). */
export async function activePrices(db: Queryable, workspaceId: string, model: string): Promise<ActivePriceRow | null> {
  const { rows } = await db.query<ActivePriceRow>(
    `SELECT input_cost_per_token::text AS input, output_cost_per_token::text AS output,
         cache_read_input_cost_per_token::text AS cache_read, cache_write_input_cost_per_token::text AS cache_write,
         long_context_above_tokens::text AS long_above, long_input_cost_per_token::text AS long_input,
         long_output_cost_per_token::text AS long_output, long_cache_read_input_cost_per_token::text AS long_cache_read,
         long_cache_write_input_cost_per_token::text AS long_cache_write
       FROM model_pricing WHERE workspace_id = $1 AND model = $2 AND is_active`,
    [workspaceId, model],
  );
  return rows[0] ?? null;
}

export async function getPricing(
  db: Queryable,
  workspaceId: string,
  model: string,
  options: { forUpdate?: boolean } = {},
): Promise<ModelPricing | null> {
  const { rows } = await db.query(
    `SELECT * FROM model_pricing WHERE workspace_id = $1 AND model = $2${options.forUpdate ? ' FOR UPDATE' : ''}`,
    [workspaceId, model],
  );
  return rows[0] ? toPricing(rows[0]) : null;
}

export interface PricingInput {
  input_cost_per_token: number;
  output_cost_per_token: number;
  cache_read_input_cost_per_token?: number | null;
  cache_write_input_cost_per_token?: number | null;
  /** Absent or null: no long-context tier. */
  long_context?: LongContextEntry | null;
  is_active: boolean;
}

/** The columns an entry's prices are written to, in this order (after id, workspace_id, model). */
export const PRICE_COLUMNS = `input_cost_per_token, output_cost_per_token, cache_read_input_cost_per_token,
    cache_write_input_cost_per_token, long_context_above_tokens, long_input_cost_per_token, long_output_cost_per_token,
    long_cache_read_input_cost_per_token, long_cache_write_input_cost_per_token`;

/** `SET` of every price column from `EXCLUDED`: an upsert replaces the whole entry, its tier with it. */
const SET_PRICES = PRICE_COLUMNS.split(',')
  .map((column) => `${column.trim()} = EXCLUDED.${column.trim()}`)
  .join(', ');

const UPSERT = `INSERT INTO model_pricing AS p (id, workspace_id, model, ${PRICE_COLUMNS}, is_active, source, created_at, updated_at)
  VALUES ($1, $2, $3, $4::numeric, $5::numeric, $6::numeric, $7::numeric, $8::bigint, $9::numeric, $10::numeric,
    $11::numeric, $12::numeric, $13, $14, $15, $15)
  ON CONFLICT (workspace_id, model) DO UPDATE SET ${SET_PRICES},
    is_active = EXCLUDED.is_active, source = EXCLUDED.source, updated_at = $15
  RETURNING *`;

const optionalDecimal = (value: number | null | undefined) =>
  value === null || value === undefined ? null : decimalText(value);

/** An entry's prices as exact decimal text, in PRICE_COLUMNS' order (null: no price, no tier). */
export function priceTexts(input: Omit<PricingInput, 'is_active'>): (string | null)[] {
  const long = input.long_context ?? null;
  return [
    decimalText(input.input_cost_per_token),
    decimalText(input.output_cost_per_token),
    optionalDecimal(input.cache_read_input_cost_per_token),
    optionalDecimal(input.cache_write_input_cost_per_token),
    long ? String(long.above_prompt_tokens) : null,
    long ? decimalText(long.input_cost_per_token) : null,
    long ? decimalText(long.output_cost_per_token) : null,
    optionalDecimal(long?.cache_read_input_cost_per_token),
    optionalDecimal(long?.cache_write_input_cost_per_token),
  ];
}

function upsertParams(
  workspaceId: string,
  model: string,
  input: PricingInput,
  source: PricingSource,
  now: Date,
): unknown[] {
  return [randomUUID(), workspaceId, model, ...priceTexts(input), input.is_active, source, now];
}

/** A PUT: the entry is the user's from now on (an import keeps it unless told to overwrite). */
export async function upsertPricing(
  db: Queryable,
  workspaceId: string,
  model: string,
  input: PricingInput,
  now: Date,
): Promise<ModelPricing> {
  const { rows } = await db.query(UPSERT, upsertParams(workspaceId, model, input, 'user', now));
  return toPricing(rows[0]!);
}

export interface CatalogEntry extends PricingInput {
  model: string;
}

/**
 * What an import did to one model: `new` (created), `changed` (its prices replaced),
 * `unchanged`, or `kept` (a user's entry that differs from the catalog, left alone).
 */
export type ImportChange = 'new' | 'changed' | 'unchanged' | 'kept';

export interface ImportedEntry {
  model: string;
  change: ImportChange;
  /** The entry before the import; `null` when it is new. */
  before: ModelPricing | null;
  /** The entry after the import (for `dryRun`: what it would be). */
  after: Omit<ModelPricing, 'id'> & { id: string | null };
}

export interface ImportOptions {
  /** Replace entries a user set by hand too. */
  overwrite: boolean;
  /** Answer what would change, change nothing. */
  dryRun: boolean;
  now: Date;
  /** Runs in the import's transaction, after its writes (the caller's record of the change). */
  inTransaction?: (tx: Queryable, lines: ImportedEntry[]) => Promise<void>;
}

/** Exact decimal text in one spelling, so that `0.000000150` and `1.5e-7` compare equal. */
function sameDecimal(stored: unknown, given: number | null | undefined): boolean {
  if (stored === null || stored === undefined) return given === null || given === undefined;
  if (given === null || given === undefined) return false;
  // NUMERIC comes back as text from pg and PGlite; anything else is no price of ours.
  if (typeof stored !== 'string' && typeof stored !== 'number') return false;
  return formatDecimal(parseDecimal(String(stored))) === formatDecimal(parseDecimal(decimalText(given)));
}

function samePrices(row: Record<string, unknown>, entry: CatalogEntry): boolean {
  const long = entry.long_context ?? null;
  const threshold = row.long_context_above_tokens ?? null;
  return (
    sameDecimal(row.input_cost_per_token, entry.input_cost_per_token) &&
    sameDecimal(row.output_cost_per_token, entry.output_cost_per_token) &&
    sameDecimal(row.cache_read_input_cost_per_token, entry.cache_read_input_cost_per_token ?? null) &&
    sameDecimal(row.cache_write_input_cost_per_token, entry.cache_write_input_cost_per_token ?? null) &&
    (threshold === null ? null : Number(threshold)) === (long?.above_prompt_tokens ?? null) &&
    sameDecimal(row.long_input_cost_per_token, long?.input_cost_per_token) &&
    sameDecimal(row.long_output_cost_per_token, long?.output_cost_per_token) &&
    sameDecimal(row.long_cache_read_input_cost_per_token, long?.cache_read_input_cost_per_token) &&
    sameDecimal(row.long_cache_write_input_cost_per_token, long?.cache_write_input_cost_per_token) &&
    Boolean(row.is_active) === entry.is_active
  );
}

/**
 * Imports catalog prices into a workspace in one transaction: creates the models it lacks,
 * replaces catalog entries whose prices changed, and leaves entries a user set by hand
 * (source `user`) alone unless `overwrite`. Entries the import writes are the catalog's.
 * Answers one line per entry, in the order given (a model named twice: its last mention wins).
 */
export async function importPricing(
  db: Db,
  workspaceId: string,
  entries: readonly CatalogEntry[],
  options: ImportOptions,
): Promise<ImportedEntry[]> {
  const last = new Map(entries.map((entry) => [entry.model, entry]));
  return db.transaction(async (tx) => {
    // Locked so that two imports (or an import and a PUT) do not decide on the same stale rows.
    const { rows } = await tx.query(
      'SELECT * FROM model_pricing WHERE workspace_id = $1 AND model = ANY($2::text[]) ORDER BY model FOR UPDATE',
      [workspaceId, [...last.keys()]],
    );
    const existing = new Map(rows.map((row) => [String(row.model), row]));
    const decided = [...last.values()].map((entry) => {
      const row = existing.get(entry.model);
      const before = row ? toPricing(row) : null;
      const change: ImportChange = !row
        ? 'new'
        : samePrices(row, entry)
          ? 'unchanged'
          : before!.source === 'user' && !options.overwrite
            ? 'kept'
            : 'changed';
      return { entry, before, change };
    });
    const writes = decided
      .filter((decision) => decision.change === 'new' || decision.change === 'changed')
      .map((decision) => decision.entry);
    const written = options.dryRun
      ? new Map<string, ModelPricing>()
      : await writeCatalogEntries(tx, workspaceId, writes, options.now);
    const lines = decided.map(({ entry, before, change }): ImportedEntry => {
      const after =
        written.get(entry.model) ??
        (change === 'new' || change === 'changed'
          ? { id: before?.id ?? null, model: entry.model, ...entryPrices(entry), source: 'catalog' as const }
          : before!);
      return { model: entry.model, change, before, after };
    });
    await options.inTransaction?.(tx, lines);
    return lines;
  });
}

/** Catalog entries upserted in one statement (a new workspace takes a whole catalog at once). */
async function writeCatalogEntries(
  tx: Queryable,
  workspaceId: string,
  entries: readonly CatalogEntry[],
  now: Date,
): Promise<Map<string, ModelPricing>> {
  if (entries.length === 0) return new Map();
  const { rows } = await tx.query(
    `INSERT INTO model_pricing AS p (id, workspace_id, model, ${PRICE_COLUMNS}, is_active, source, created_at, updated_at)
     SELECT id, $2::uuid, model, ${PRICE_RECORD_COLUMNS}, is_active, 'catalog', $3::timestamptz, $3::timestamptz
     FROM json_to_recordset($1::json) AS v(id uuid, model text, ${PRICE_RECORD_TYPES}, is_active boolean)
     ORDER BY model
     ON CONFLICT (workspace_id, model) DO UPDATE SET ${SET_PRICES},
       is_active = EXCLUDED.is_active, source = 'catalog', updated_at = $3
     RETURNING *`,
    // Prices as decimal text (JSON strings), so that json_to_recordset reads them as written.
    [
      JSON.stringify(
        entries.map((entry) => ({
          id: randomUUID(),
          model: entry.model,
          ...priceRecord(entry),
          is_active: entry.is_active,
        })),
      ),
      workspaceId,
      now,
    ],
  );
  return new Map(rows.map((row) => [String(row.model), toPricing(row)]));
}

function entryPrices(entry: CatalogEntry) {
  const long = entry.long_context ?? null;
  return {
    input_cost_per_token: entry.input_cost_per_token,
    output_cost_per_token: entry.output_cost_per_token,
    cache_read_input_cost_per_token: entry.cache_read_input_cost_per_token ?? null,
    cache_write_input_cost_per_token: entry.cache_write_input_cost_per_token ?? null,
    long_context: long && {
      ...long,
      cache_read_input_cost_per_token: long.cache_read_input_cost_per_token ?? null,
      cache_write_input_cost_per_token: long.cache_write_input_cost_per_token ?? null,
    },
    is_active: entry.is_active,
  };
}

/** Names of an entry's prices in a JSON record (`priceRecord`), in PRICE_COLUMNS' order. */
const PRICE_RECORD_NAMES = [
  'input',
  'output',
  'cache_read',
  'cache_write',
  'long_above',
  'long_input',
  'long_output',
  'long_cache_read',
  'long_cache_write',
] as const;

/** The record's fields as json_to_recordset reads them (the threshold a bigint, prices numeric). */
export const PRICE_RECORD_TYPES = PRICE_RECORD_NAMES.map(
  (name) => `${name} ${name === 'long_above' ? 'bigint' : 'numeric'}`,
).join(', ');
export const PRICE_RECORD_COLUMNS = PRICE_RECORD_NAMES.join(', ');

/** An entry's prices as a JSON record's fields (exact decimal text), for json_to_recordset. */
export function priceRecord(entry: Omit<PricingInput, 'is_active'>): Record<string, string | null> {
  const texts = priceTexts(entry);
  return Object.fromEntries(PRICE_RECORD_NAMES.map((name, i) => [name, texts[i] ?? null]));
}
