/**
 * Exact money helpers. The API speaks USD as JSON numbers; storage and counters use integers.
 * A JSON number's shortest round-trip text (what `String(n)` prints) is the decimal the caller
 * wrote for any value of up to 17 significant digits, so we parse that text, never the double.
 */

const MICROS_PER_USD = 1_000_000n;

/** A non-negative decimal as an integer scaled by 10^scale, rounded half-up. */
function toScaledInteger(value: number, scale: number): bigint {
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`not a non-negative finite number: ${value}`);
  const [mantissa = '0', exponentText = '0'] = String(value).toLowerCase().split('e');
  const [whole = '0', fraction = ''] = mantissa.split('.');
  const digits = BigInt(whole + fraction);
  // value = digits * 10^(exponent - fraction.length); we want value * 10^scale.
  const shift = Number(exponentText) - fraction.length + scale;
  if (shift >= 0) return digits * 10n ** BigInt(shift);
  const divisor = 10n ** BigInt(-shift);
  const quotient = digits / divisor;
  return (digits % divisor) * 2n >= divisor ? quotient + 1n : quotient;
}

/** USD (a JSON number) to integer microdollars, rounded half-up. */
export function usdToMicros(usd: number): number {
  const micros = toScaledInteger(usd, 6);
  if (micros > BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError('amount too large');
  return Number(micros);
}

/** Integer microdollars to USD. One correctly rounded division: the double nearest the exact value. */
export function microsToUsd(micros: number | bigint | string): number {
  return Number(micros) / Number(MICROS_PER_USD);
}

/**
 * The exact decimal text of a JSON number, for storage in a NUMERIC column (`1.5e-7` becomes
 * `0.00000015`). Postgres would accept the exponent form too; plain text keeps logs readable.
 */
export function decimalText(value: number): string {
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`not a non-negative finite number: ${value}`);
  const scale = 30;
  const scaled = toScaledInteger(value, scale)
    .toString()
    .padStart(scale + 1, '0');
  const whole = scaled.slice(0, -scale);
  const fraction = scaled.slice(-scale).replace(/0+$/, '');
  return fraction ? `${whole}.${fraction}` : whole;
}

/** A NUMERIC column's text (exact) as the JSON number the API answers with. */
export function numericToUsd(text: string | number | null): number | null {
  return text === null ? null : Number(text);
}
