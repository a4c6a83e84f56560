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
export interface Decimal {
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

/** Price texts parsed so far (a bounded memo of a pure function; a decimal is never changed). */
const parsedPrices = new Map<string, Readonly<Decimal>>();

/**
 * A price as an exact decimal, parsed once per price text: a workspace has a few prices, and
 * every call is priced (its estimate, its result) with them.
 */
export function priceDecimal(text: string): Readonly<Decimal> {
  let parsed = parsedPrices.get(text);
  if (parsed === undefined) {
    parsed = parseDecimal(text);
    if (parsedPrices.size >= 10_000) parsedPrices.clear();
    parsedPrices.set(text, parsed);
  }
  return parsed;
}

const POWERS_OF_TEN = Array.from({ length: 64 }, (_, exponent) => 10n ** BigInt(exponent));

const powerOfTen = (exponent: number): bigint => POWERS_OF_TEN[exponent] ?? 10n ** BigInt(exponent);

function rescale(value: Readonly<Decimal>, scale: number): bigint {
  return scale === value.scale ? value.digits : value.digits * powerOfTen(scale - value.scale);
}

/** Whether `one` is more than `other`, exactly. */
export function decimalAbove(one: Readonly<Decimal>, other: Readonly<Decimal>): boolean {
  const scale = Math.max(one.scale, other.scale);
  return rescale(one, scale) > rescale(other, scale);
}

/** The shortest plain text of an exact decimal (`0.000036`, `12`). */
export function formatDecimal(value: Decimal): string {
  if (value.scale === 0) return value.digits.toString();
  const text = value.digits.toString().padStart(value.scale + 1, '0');
  const whole = text.slice(0, -value.scale);
  const fraction = text.slice(-value.scale).replace(/0+$/, '');
  return fraction ? `${whole}.${fraction}` : whole;
}

/** The cost rule's sum of `count x price` terms, exact, at the tier the call is billed at. */
function exactCost(tokens: CallTokens, modelPrices: TokenPrices): Decimal {
  const prices = tierFor(tokens.promptTokens, modelPrices);
  const input = priceDecimal(prices.input);
  const cacheRead = prices.cacheRead === null ? input : priceDecimal(prices.cacheRead);
  const cacheWrite = prices.cacheWrite === null ? input : priceDecimal(prices.cacheWrite);
  const output = priceDecimal(prices.output);
  const scale = Math.max(input.scale, cacheRead.scale, cacheWrite.scale, output.scale);
  const digits =
    BigInt(uncachedInput(tokens)) * rescale(input, scale) +
    BigInt(tokens.cacheReadTokens ?? 0) * rescale(cacheRead, scale) +
    BigInt(tokens.cacheWriteTokens ?? 0) * rescale(cacheWrite, scale) +
    BigInt(tokens.completionTokens ?? 0) * rescale(output, scale);
  return { digits, scale };
}

/** The call's cost in USD as exact decimal text, or `null` when no count is known. */
export function callCost(tokens: CallTokens, modelPrices: TokenPrices): string | null {
  return isPriced(tokens) ? formatDecimal(exactCost(tokens, modelPrices)) : null;
}

/**
 * How a cost becomes whole microdollars: half-up for what spend counters add (and Postgres's
 * `round`), up for an upper bound (an estimate stays one).
 */
export type MicrosRounding = 'half-up' | 'up';

function toMicros(value: Decimal, rounding: MicrosRounding): bigint {
  if (value.scale <= 6) return rescale(value, 6);
  const divisor = powerOfTen(value.scale - 6);
  const quotient = value.digits / divisor;
  const remainder = value.digits % divisor;
  if (rounding === 'up') return remainder > 0n ? quotient + 1n : quotient;
  return remainder * 2n >= divisor ? quotient + 1n : quotient;
}

/**
 * The call's cost in integer microdollars, or `null` when no count is known: the same as
 * `costToMicros(callCost(...))`, without the decimal text between.
 */
export function callCostMicros(
  tokens: CallTokens,
  modelPrices: TokenPrices,
  rounding: MicrosRounding = 'half-up',
): bigint | null {
  return isPriced(tokens) ? toMicros(exactCost(tokens, modelPrices), rounding) : null;
}

/** An exact USD decimal text as integer microdollars, rounded half-up (what spend counters add) or up. */
export function costToMicros(cost: string, rounding: MicrosRounding = 'half-up'): bigint {
  return toMicros(parseDecimal(cost), rounding);
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
