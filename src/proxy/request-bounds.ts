/**
 * What a proxied request says of its own size, for the estimate of its cost
 * (src/money/call-estimate.ts): its bytes, its output limit, how many completions it asks for.
 * Read from the body the proxy already parsed; never throws.
 */
import type { CallBounds } from '../money/call-estimate.js';
import { asObject, endpointPath } from './json-fields.js';

/** A positive whole number of tokens or completions; anything else is no limit. */
const count = (value: unknown): number | null =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : null;

/**
 * @param path the upstream-relative path (embeddings write no output)
 * @param body the parsed JSON body (`undefined` when not JSON)
 * @param bodyBytes the body's size as sent upstream
 */
export function requestBounds(path: string, body: unknown, bodyBytes: number): CallBounds {
  const request = asObject(body) ?? {};
  if (endpointPath(path).endsWith('/embeddings')) return { inputTokens: bodyBytes, maxOutputTokens: 0, choices: 1 };
  // Chat's `max_completion_tokens` replaced `max_tokens` (which o-series models refuse); the
  // Responses API says `max_output_tokens`; Anthropic's `max_tokens` includes thinking.
  const limit = count(request.max_completion_tokens) ?? count(request.max_tokens) ?? count(request.max_output_tokens);
  // Legacy completions bill every one of `best_of` candidates, of which `n` are returned.
  const choices = Math.max(1, count(request.n) ?? 1, count(request.best_of) ?? 1);
  return { inputTokens: bodyBytes, maxOutputTokens: limit, choices };
}
