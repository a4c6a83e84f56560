/**
 * What a proxied request says of its own size, for the estimate of its cost
 * (src/money/call-estimate.ts): its bytes, its output limit, how many completions it asks for.
 * Read from the body the proxy already parsed.
 */
import { ApiError } from '../errors.js';
import type { CallBounds } from '../money/call-estimate.js';
import { MAX_TOKEN_COUNT } from '../money/cost.js';
import { asObject, endpointPath } from './json-fields.js';

/**
 * A whole number of tokens or completions; anything else that is not a whole number is no limit
 * (the upstream judges it). A whole number past any real count (`n: 1e308`) is the client's
 * error: no provider serves it, and no estimate can price it.
 */
function count(request: Record<string, unknown>, field: string, within = ''): number | null {
  const value = request[field];
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) return null;
  if (value > MAX_TOKEN_COUNT)
    throw new ApiError('BAD_REQUEST', `"${within}${field}" must be at most ${MAX_TOKEN_COUNT}.`);
  return value;
}

/** Gemini's methods that embed: they write no output. */
const GEMINI_EMBEDDING = /:(?:embedContent|batchEmbedContents)$/;

/**
 * Gemini's bounds, in `generationConfig` (its REST API also takes the proto's snake_case names):
 * `maxOutputTokens`, which thinking tokens count against, and `candidateCount` candidates.
 */
function geminiBounds(request: Record<string, unknown>): { limit: number | null; choices: number | null } {
  const [within, config] =
    request.generationConfig !== undefined
      ? ['generationConfig.', asObject(request.generationConfig)]
      : ['generation_config.', asObject(request.generation_config)];
  if (!config) return { limit: null, choices: null };
  const either = (camel: string, snake: string) => count(config, camel, within) ?? count(config, snake, within);
  return {
    limit: either('maxOutputTokens', 'max_output_tokens'),
    choices: either('candidateCount', 'candidate_count'),
  };
}

/**
 * @param path the upstream-relative path (embeddings write no output)
 * @param body the parsed JSON body (`undefined` when not JSON)
 * @param bodyBytes the body's size as sent upstream
 * @throws ApiError BAD_REQUEST when a count is beyond any real one
 */
export function requestBounds(path: string, body: unknown, bodyBytes: number): CallBounds {
  const request = asObject(body) ?? {};
  const endpoint = endpointPath(path);
  if (endpoint.endsWith('/embeddings') || GEMINI_EMBEDDING.test(endpoint))
    return { inputTokens: bodyBytes, maxOutputTokens: 0, choices: 1 };
  const gemini = geminiBounds(request);
  // Chat's `max_completion_tokens` replaced `max_tokens` (which o-series models refuse); the
  // Responses API says `max_output_tokens`; Anthropic's `max_tokens` includes thinking.
  const limit =
    count(request, 'max_completion_tokens') ??
    count(request, 'max_tokens') ??
    count(request, 'max_output_tokens') ??
    gemini.limit;
  // Legacy completions bill every one of `best_of` candidates, of which `n` are returned.
  const choices = Math.max(1, count(request, 'n') ?? 1, count(request, 'best_of') ?? 1, gemini.choices ?? 1);
  return { inputTokens: bodyBytes, maxOutputTokens: limit, choices };
}
