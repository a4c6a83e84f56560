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
 * Anthropic Messages (`anthropic.messages.create`): `usage.input_tokens` / `usage.output_tokens`.
 * Cache reads and writes (`cache_*_input_tokens`) are not added: they are priced differently.
 */
export function anthropicMessages(response: unknown): TokenCounts | undefined {
  return readUsage(response, 'input_tokens', 'output_tokens');
}

/** The bundled extractors; `openai` is an alias of `openaiChatCompletions`. */
export const extractors = Object.freeze({
  openai: openaiChatCompletions,
  openaiChatCompletions,
  openaiResponses,
  anthropic: anthropicMessages,
  anthropicMessages,
});
