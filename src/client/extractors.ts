import type { TokenCounts } from './types.js';

/**
 * Ready-made token extractors for provider responses. Each takes the provider SDK's response
 * object and returns `[promptTokens, completionTokens]`, or undefined when the response carries no
 * usage (a stream, a mocked call, a proxy that strips it). They are typed structurally so that this
 * package does not depend on any provider SDK.
 */

/** Reads two non-negative integer fields of `response.usage`; undefined unless both are present. */
function readUsage(response: unknown, promptField: string, completionField: string): TokenCounts | undefined {
  if (typeof response !== 'object' || response === null) return undefined;
  const usage = (response as { usage?: unknown }).usage;
  if (typeof usage !== 'object' || usage === null) return undefined;
  const prompt = (usage as Record<string, unknown>)[promptField];
  const completion = (usage as Record<string, unknown>)[completionField];
  if (!isTokenCount(prompt) || !isTokenCount(completion)) return undefined;
  return [prompt, completion];
}

/** A usable token count: a non-negative safe integer. */
export function isTokenCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

/** OpenAI Chat Completions (`openai.chat.completions.create`): `usage.prompt_tokens` / `usage.completion_tokens`. */
export function openaiChatCompletions(response: unknown): TokenCounts | undefined {
  return readUsage(response, 'prompt_tokens', 'completion_tokens');
}

/** OpenAI Responses API (`openai.responses.create`): `usage.input_tokens` / `usage.output_tokens`. */
export function openaiResponses(response: unknown): TokenCounts | undefined {
  return readUsage(response, 'input_tokens', 'output_tokens');
}

/**
 * Anthropic Messages (`anthropic.messages.create`): prompt tokens are `usage.input_tokens` plus the
 * prompt cache's writes and reads (`cache_creation_input_tokens`, `cache_read_input_tokens`), which
 * Anthropic counts apart from `input_tokens`; completion tokens are `usage.output_tokens`. The
 * proxy counts them the same way. All are priced at the model's input price: a budget then never
 * under-counts a cached prompt (Anthropic bills cache reads for less, cache writes for more).
 */
export function anthropicMessages(response: unknown): TokenCounts | undefined {
  const counts = readUsage(response, 'input_tokens', 'output_tokens');
  if (!counts) return undefined;
  const usage = (response as { usage: Record<string, unknown> }).usage;
  let prompt = counts[0];
  for (const field of ['cache_creation_input_tokens', 'cache_read_input_tokens']) {
    const cached = usage[field];
    if (isTokenCount(cached)) prompt += cached;
  }
  return [prompt, counts[1]];
}

/** The bundled extractors; `openai` is an alias of `openaiChatCompletions`. */
export const extractors = Object.freeze({
  openai: openaiChatCompletions,
  openaiChatCompletions,
  openaiResponses,
  anthropic: anthropicMessages,
  anthropicMessages,
});
