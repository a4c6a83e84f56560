/**
 * Prices as a person types them: per million tokens (as providers publish them) or per token (as
 * the API stores them). A figure that could be read both ways is refused with what to type, never
 * guessed: a price off by a million would make every budget decorative, or trip at once.
 */
import { CliError } from './errors.js';

export type PriceUnit = 'per-million' | 'per-token';

/**
 * No model costs more than $1,000 per million tokens (a tenth of a cent per token): a per-token
 * figure above that, or a per-million figure below a tenth of a cent, is almost surely the other unit.
 */
export const MAX_PER_TOKEN_USD = 0.001;
export const MIN_PER_MILLION_USD = 0.001;

const DECIMAL = /^\d+(\.\d+)?([eE][-+]?\d+)?$/;

/** `--per-million` or `--per-token`, or none (then only a figure that can only be per token is taken). */
export function priceUnit(options: { perMillion?: boolean; perToken?: boolean }): PriceUnit | null {
  if (options.perMillion && options.perToken) {
    throw new CliError('give --per-million or --per-token, not both.');
  }
  return options.perMillion ? 'per-million' : options.perToken ? 'per-token' : null;
}

/**
 * USD per token from a typed figure, parsed from its decimal text (`"0.15"` per million is
 * `0.15e-6`, never a product in binary floating point).
 */
export function pricePerToken(text: string, flag: string, unit: PriceUnit | null): number {
  const typed = text.trim();
  if (!DECIMAL.test(typed)) {
    throw new CliError(`${flag} must be a non-negative decimal number of USD (got ${JSON.stringify(text)}).`);
  }
  const figure = Number(typed);
  if (!Number.isFinite(figure)) throw new CliError(`${flag} is out of range (got ${JSON.stringify(text)}).`);
  if (unit === 'per-million') {
    if (figure > 0 && figure < MIN_PER_MILLION_USD) {
      throw new CliError(
        `${flag} ${typed} USD per million tokens is less than a tenth of a cent per million: ` +
          `if ${typed} is the price of one token, give --per-token instead of --per-million.`,
      );
    }
    return Number(`${typed}e-6`);
  }
  if (figure > MAX_PER_TOKEN_USD) {
    const asked = unit === 'per-token' ? 'per token' : 'with no unit';
    throw new CliError(
      `${flag} ${typed} USD ${asked} would be $${typed}M per million tokens: ` +
        `if ${typed} is the price per million tokens (as providers publish it), add --per-million.`,
    );
  }
  return figure;
}
