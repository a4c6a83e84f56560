/**
 * A step's cost computed in the daemon, exactly as `finishSteps` prices it in SQL: prompt tokens
 * at the input price plus completion tokens at the output price, in exact decimal arithmetic,
 * rounded half-up to the microdollar. Used where the cost must count before the record commits
 * (a result's pending spend); the record's own cost stays the SQL's.
 */

/** A price per token as an exact decimal: `digits / 10^scale` USD. */
export interface ExactPrice {
  digits: bigint;
  scale: number;
}

export interface ModelPrices {
  input: ExactPrice;
  output: ExactPrice;
}

/** A NUMERIC column's text (`0.0000015`, never an exponent) as an exact price. */
export function parsePrice(text: string): ExactPrice {
  const match = /^(\d+)(?:\.(\d+))?$/.exec(text.trim());
  if (!match) throw new RangeError(`not a non-negative decimal: ${text}`);
  const fraction = match[2] ?? '';
  return { digits: BigInt(match[1]! + fraction), scale: fraction.length };
}

const MICRO_SCALE = 6;

/** `sum(tokens_i * price_i)` USD in microdollars, rounded half-up. Null token counts count as 0. */
export function costMicros(prices: ModelPrices, promptTokens: number | null, completionTokens: number | null): number {
  const scale = Math.max(prices.input.scale, prices.output.scale);
  const at = (price: ExactPrice) => price.digits * 10n ** BigInt(scale - price.scale);
  const exact = BigInt(promptTokens ?? 0) * at(prices.input) + BigInt(completionTokens ?? 0) * at(prices.output);
  // exact / 10^scale USD = exact * 10^6 / 10^scale microdollars.
  const shift = scale - MICRO_SCALE;
  if (shift <= 0) return Number(exact * 10n ** BigInt(-shift));
  const divisor = 10n ** BigInt(shift);
  const quotient = exact / divisor;
  return Number(exact % divisor * 2n >= divisor ? quotient + 1n : quotient);
}
