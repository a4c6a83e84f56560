/**
 * A model call's cost: the one definition, in exact decimal. Steps are priced by Postgres, in the
 * statement that stores their result (`costSql`, NUMERIC arithmetic); the same rule is written
 * here for code that prices without the database (an estimate, a check, a test) as `callCost`.
 * The two must agree to the last digit; test/money/cost-sql.test.ts holds them to it.
 *
 * cost = uncached input x input price
 *      + cache reads    x cache-read price  (none: the input price)
 *      + cache writes   x cache-write price (none: the input price)
 *      + completion     x output price
 *
 * where uncached input = prompt - cache reads - cache writes: `prompt_tokens` counts every input
 * token, cached or not (OpenAI's meaning; Anthropic's `input_tokens` is the uncached part only).
 * Reasoning tokens are part of the completion and priced as output.
 *
 * A long-context tier (Gemini Pro above 200k prompt tokens, GPT-5.4 above 272k, Claude Sonnet 4
 * above 200k) prices the whole call at its own prices once `prompt_tokens` is above its threshold:
 * the providers bill every token of such a call, input and output, cached or not, at the higher
 * rates (not only the tokens past the threshold).
 */

import { decimalText } from './decimal.js';

/**
 * The largest token count believed: the API's own bound on a step's counts (`Count` in
 * src/contract/common.ts). Beyond it a number is garbage, not usage.
 */
export { MAX_TOKEN_COUNT } from '../contract/provider-usage.js';

/** Token counts of one call; `null`: not reported. */
export interface CallTokens {
  promptTokens: number | null;
  completionTokens: number | null;
  cacheReadTokens: number | null;
  cacheWriteTokens: number | null;
}

/** USD per token, as exact decimal text (`"0.00000015"`); `null` cache prices: the input price. */
export interface TierPrices {
  input: string;
  output: string;
  cacheRead: string | null;
  cacheWrite: string | null;
}

/** The prices of a call whose prompt has more than `abovePromptTokens` tokens: every token of it. */
export interface LongContextPrices extends TierPrices {
  abovePromptTokens: number;
}

/** A model's prices: the standard tier, and the long-context one when the model has one. */
export interface TokenPrices extends TierPrices {
  longContext?: LongContextPrices | null;
}

/** The long-context tier of a pricing entry as the API and the store give it (USD per token as JSON numbers). */
export interface LongContextEntry {
  above_prompt_tokens: number;
  input_cost_per_token: number;
  output_cost_per_token: number;
  cache_read_input_cost_per_token?: number | null;
  cache_write_input_cost_per_token?: number | null;
}

/** A pricing entry's prices (USD per token as JSON numbers, as the API and the store give them) as exact decimal text. */
export function tokenPricesOf(entry: {
  input_cost_per_token: number;
  output_cost_per_token: number;
  cache_read_input_cost_per_token?: number | null;
  cache_write_input_cost_per_token?: number | null;
  long_context?: LongContextEntry | null;
}): TokenPrices {
  const optional = (price: number | null | undefined) =>
    price === null || price === undefined ? null : decimalText(price);
  const tier = (prices: Omit<LongContextEntry, 'above_prompt_tokens'>): TierPrices => ({
    input: decimalText(prices.input_cost_per_token),
    output: decimalText(prices.output_cost_per_token),
    cacheRead: optional(prices.cache_read_input_cost_per_token),
    cacheWrite: optional(prices.cache_write_input_cost_per_token),
  });
  const long = entry.long_context;
  return {
    ...tier(entry),
    longContext: long ? { abovePromptTokens: long.above_prompt_tokens, ...tier(long) } : null,
  };
}

/** The tier a call with `promptTokens` input tokens is billed at: the long-context one above its threshold. */
export function tierFor(promptTokens: number | null, prices: TokenPrices): TierPrices {
  const long = prices.longContext;
  return long && (promptTokens ?? 0) > long.abovePromptTokens ? long : prices;
}

/** A call is priced once any of its counts is known: a call that reports none costs unknown (null). */
export function isPriced(tokens: CallTokens): boolean {
  return (
    tokens.promptTokens !== null ||
    tokens.completionTokens !== null ||
    tokens.cacheReadTokens !== null ||
    tokens.cacheWriteTokens !== null
  );
}

/** Input tokens billed at the plain input price; a provider's inconsistent counts never go below 0. */
export function uncachedInput(tokens: CallTokens): number {
  return Math.max(0, (tokens.promptTokens ?? 0) - (tokens.cacheReadTokens ?? 0) - (tokens.cacheWriteTokens ?? 0));
}

/** An exact decimal: `digits x 10^-scale`. */
interface Decimal {
  digits: bigint;
  scale: number;
}

const DECIMAL = /^(\d+)(?:\.(\d+))?$/;

/** Plain decimal text (no sign, no exponent) as an exact decimal. */
export function parseDecimal(text: string): Decimal {
  const match = DECIMAL.exec(text);
  if (!match) throw new RangeError(`not a plain non-negative decimal: ${JSON.stringify(text)}`);
  const fraction = match[2] ?? '';
  return { digits: BigInt(match[1]! + fraction), scale: fraction.length };
}

function rescale(value: Decimal, scale: number): bigint {
  return value.digits * 10n ** BigInt(scale - value.scale);
}

/** The shortest plain text of an exact decimal (`0.000036`, `12`). */
export function formatDecimal(value: Decimal): string {
  if (value.scale === 0) return value.digits.toString();
  const text = value.digits.toString().padStart(value.scale + 1, '0');
  const whole = text.slice(0, -value.scale);
  const fraction = text.slice(-value.scale).replace(/0+$/, '');
  return fraction ? `${whole}.${fraction}` : whole;
}

/** Sum of `count x price` terms, exact. */
function sumOfProducts(terms: readonly (readonly [count: number, price: string])[]): Decimal {
  const prices = terms.map(([, price]) => parseDecimal(price));
  const scale = Math.max(0, ...prices.map((price) => price.scale));
  let digits = 0n;
  terms.forEach(([count], i) => {
    digits += BigInt(count) * rescale(prices[i]!, scale);
  });
  return { digits, scale };
}

/** The call's cost in USD as exact decimal text, or `null` when no count is known. */
export function callCost(tokens: CallTokens, modelPrices: TokenPrices): string | null {
  if (!isPriced(tokens)) return null;
  const prices = tierFor(tokens.promptTokens, modelPrices);
  return formatDecimal(
    sumOfProducts([
      [uncachedInput(tokens), prices.input],
      [tokens.cacheReadTokens ?? 0, prices.cacheRead ?? prices.input],
      [tokens.cacheWriteTokens ?? 0, prices.cacheWrite ?? prices.input],
      [tokens.completionTokens ?? 0, prices.output],
    ]),
  );
}

/** An exact USD decimal text as integer microdollars, rounded half-up (what spend counters add). */
export function costToMicros(cost: string): bigint {
  const value = parseDecimal(cost);
  if (value.scale <= 6) return rescale(value, 6);
  const divisor = 10n ** BigInt(value.scale - 6);
  const quotient = value.digits / divisor;
  return (value.digits % divisor) * 2n >= divisor ? quotient + 1n : quotient;
}

/** SQL expressions of a call's token counts (bigint, NULL when unknown). */
export interface TokenColumns {
  prompt: string;
  completion: string;
  cacheRead: string;
  cacheWrite: string;
}

/** `isPriced` in SQL: a call is priced once any of its counts is known. */
export function pricedSql(columns: TokenColumns): string {
  return `(${columns.prompt} IS NOT NULL OR ${columns.completion} IS NOT NULL OR ${columns.cacheRead} IS NOT NULL OR ${columns.cacheWrite} IS NOT NULL)`;
}

/**
 * The cost rule as a SQL expression over the token columns and a `model_pricing` row aliased
 * `pricing`: NUMERIC, exact. NULL when no count is known; the caller supplies the row (NULL
 * prices, no row: NULL cost). A row's `long_*` prices replace its own when the prompt is above
 * `long_context_above_tokens` (`tierFor`); NULL there: no such tier.
 */
export function costSql(columns: TokenColumns, pricing: string): string {
  const long = `coalesce(${columns.prompt}, 0) > ${pricing}.long_context_above_tokens`;
  const price = (column: string) => `CASE WHEN ${long} THEN ${pricing}.long_${column} ELSE ${pricing}.${column} END`;
  const input = price('input_cost_per_token');
  return `CASE WHEN ${pricedSql(columns)} THEN
    greatest(coalesce(${columns.prompt}, 0) - coalesce(${columns.cacheRead}, 0) - coalesce(${columns.cacheWrite}, 0), 0) * ${input}
    + coalesce(${columns.cacheRead}, 0) * coalesce(${price('cache_read_input_cost_per_token')}, ${input})
    + coalesce(${columns.cacheWrite}, 0) * coalesce(${price('cache_write_input_cost_per_token')}, ${input})
    + coalesce(${columns.completion}, 0) * ${price('output_cost_per_token')} END`;
}
