/**
 * The upper bound of a model call's cost, known before the call: what a budget in "reserve" mode
 * reserves, and what a call whose result was lost is charged at. Pure: the caller reads the
 * request (src/proxy/request-bounds.ts) and the model's prices; the cost is the one rule of
 * cost.ts, priced at the dearest input price, rounded up to the microdollar. A request whose
 * input bound is above a long-context threshold may be billed at either tier (its real prompt
 * may be shorter than the bound): each price is then the dearer of the two tiers'.
 *
 * The bound holds for what a request says of itself: its text (input tokens are at most its
 * bytes) and its output limit. It does not hold for input the request only points at (an image
 * by URL, a file id, a server-side tool's results): see docs/budgets.md.
 */
import {
  callCostMicros,
  decimalAbove,
  MAX_TOKEN_COUNT,
  priceDecimal,
  type TierPrices,
  type TokenPrices,
} from './cost.js';

/** What a request says of its size, read by the proxy before anything is sent upstream. */
export interface CallBounds {
  /** At most this many input tokens: the request body's size in bytes (a token is at least one byte of text). */
  inputTokens: number;
  /**
   * The request's own output limit (`max_tokens`, `max_completion_tokens`, `max_output_tokens`,
   * Gemini's `generationConfig.maxOutputTokens`); null: none given.
   */
  maxOutputTokens: number | null;
  /** Completions asked for at once (OpenAI's `n`, Gemini's `candidateCount`): each may be as long as the limit. */
  choices: number;
}

/**
 * Output tokens a model may write when the request sets no limit: its documented maximum output.
 * Matched by the longest prefix of the model id (dated and suffixed ids share their family's).
 */
export const MODEL_MAX_OUTPUT_TOKENS: Readonly<Record<string, number>> = Object.freeze({
  'gpt-3.5-turbo': 4_096,
  'gpt-4': 8_192,
  'gpt-4-turbo': 4_096,
  'gpt-4o': 16_384,
  'gpt-4o-mini': 16_384,
  'gpt-4.1': 32_768,
  'gpt-4.5': 16_384,
  'gpt-5': 128_000,
  o1: 100_000,
  'o1-mini': 65_536,
  o3: 100_000,
  'o3-mini': 100_000,
  'o4-mini': 100_000,
  'claude-2': 4_096,
  'claude-3': 4_096,
  'claude-3-5': 8_192,
  'claude-3-7': 64_000,
  'claude-sonnet-4': 64_000,
  'claude-opus-4': 32_000,
  'claude-haiku-4': 64_000,
  'claude-opus-4-5': 64_000,
  'gemini-1.5': 8_192,
  'gemini-2.0': 8_192,
  'gemini-2.5': 65_536,
});

/**
 * Output tokens assumed for a model the table does not know and a request without a limit: the
 * largest output most current models allow, so an unknown model's call is not waved through.
 */
export const FALLBACK_MAX_OUTPUT_TOKENS = 32_768;

/** Models' maximum outputs as looked up (every proxied call's estimate asks), up to MAX_OUTPUTS_KEPT. */
const maxOutputs = new Map<string, number>();
const MAX_OUTPUTS_KEPT = 1_000;

/** The model's maximum output by the table, else the fallback. */
export function maxOutputTokens(model: string): number {
  let tokens = maxOutputs.get(model);
  if (tokens === undefined) {
    tokens = lookUpMaxOutput(model);
    if (maxOutputs.size >= MAX_OUTPUTS_KEPT) maxOutputs.clear();
    maxOutputs.set(model, tokens);
  }
  return tokens;
}

function lookUpMaxOutput(model: string): number {
  const id = model.toLowerCase().replace(/^.*\//, ''); // "openai/gpt-4o" as "gpt-4o"
  let best: string | null = null;
  for (const prefix of Object.keys(MODEL_MAX_OUTPUT_TOKENS)) {
    if (id.startsWith(prefix) && (best === null || prefix.length > best.length)) best = prefix;
  }
  return best === null ? FALLBACK_MAX_OUTPUT_TOKENS : MODEL_MAX_OUTPUT_TOKENS[best]!;
}

/**
 * A token count as the estimate may use it: a whole number from 0 to MAX_TOKEN_COUNT. A bound
 * past that (or not a number at all) stands as MAX_TOKEN_COUNT: still an upper bound of any real
 * call, and one the exact arithmetic takes (`BigInt` refuses Infinity and fractions).
 */
function boundedTokens(tokens: number): number {
  if (Number.isNaN(tokens)) return MAX_TOKEN_COUNT;
  return Math.min(MAX_TOKEN_COUNT, Math.max(0, Math.ceil(tokens)));
}

/** The output tokens a call may bill: its limit (or the model's maximum) for each completion. */
export function outputTokenBound(bounds: CallBounds, model: string): number {
  const limit = bounds.maxOutputTokens ?? maxOutputTokens(model);
  return boundedTokens(limit * Math.max(1, bounds.choices));
}

/** The dearer of two exact decimal prices (`other` null: none). */
function dearer(one: string, other: string | null): string {
  return other !== null && decimalAbove(priceDecimal(other), priceDecimal(one)) ? other : one;
}

/** The dearest input price of a tier: an input token may be billed at any of them (a cache write costs more). */
const dearestInput = (tier: TierPrices, than: string | null = null): string =>
  dearer(dearer(dearer(tier.input, tier.cacheRead), tier.cacheWrite), than);

/**
 * The most a call can cost at `prices`, in microdollars (capped at `capMicros`). A call of at
 * most `inputTokens` input tokens may be billed at the standard tier, or at the long-context one
 * when the bound is above its threshold (the bound, not the real prompt): each price is then the
 * dearer of the two tiers'.
 */
export function estimateCallMicros(
  bounds: CallBounds,
  model: string,
  prices: TokenPrices,
  capMicros = Number.MAX_SAFE_INTEGER,
): number {
  const inputTokens = boundedTokens(bounds.inputTokens);
  const long = prices.longContext && inputTokens > prices.longContext.abovePromptTokens ? prices.longContext : null;
  const input = long ? dearestInput(long, dearestInput(prices)) : dearestInput(prices);
  const output = long ? dearer(prices.output, long.output) : prices.output;
  const micros = callCostMicros(
    {
      promptTokens: inputTokens,
      completionTokens: outputTokenBound(bounds, model),
      cacheReadTokens: null,
      cacheWriteTokens: null,
    },
    { input, output, cacheRead: null, cacheWrite: null },
    'up',
  )!;
  return Math.min(Number(micros), capMicros);
}
