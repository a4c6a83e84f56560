import { tokenCount, tokensFromUsage, usageFold, type TokenFields, type UsageFormat } from './shared/provider-usage.js';
import type { StreamUsageReader, TokenCounts, TokenExtractor, TokenUsage } from './types.js';

/**
 * Ready-made token extractors for provider responses. Each takes the provider SDK's response
 * object and returns a {@link TokenUsage} (prompt tokens counting every input token, with the
 * prompt cache's reads and writes and the reasoning tokens as parts), or undefined when the
 * response carries no usage (a mocked call, a proxy that strips it). Each also reads a stream's
 * chunks (`streamReader`), for calls that return one. They are typed structurally so that this
 * package does not depend on any provider SDK; the mapping of each provider's usage is the
 * daemon's own (src/shared/provider-usage.ts), so the SDK and the proxy count a call alike.
 */

const fieldsOf = (value: unknown): Record<string, unknown> | undefined =>
  typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;

/** A usable token count: a whole number from 0 to the daemon's bound. */
export function isTokenCount(value: unknown): value is number {
  return tokenCount(value) !== null;
}

/** Our fields as an extractor answers them: undefined unless both totals were reported. */
function asTokenUsage(tokens: TokenFields | undefined): TokenUsage | undefined {
  if (tokens?.promptTokens == null || tokens.completionTokens == null) return undefined;
  return { ...tokens, promptTokens: tokens.promptTokens, completionTokens: tokens.completionTokens };
}

/**
 * An extractor of `format` that reads a response's `usage`, and streamed, each chunk's usage
 * where `usageOf` finds it (null: the chunk carries none).
 */
function extractorOf(format: UsageFormat, usageOf: (chunk: unknown) => unknown) {
  const extract = (response: unknown): TokenUsage | undefined =>
    asTokenUsage(tokensFromUsage(format, fieldsOf(response)?.usage));
  const streamReader = (): StreamUsageReader => {
    const fold = usageFold(format);
    return {
      onChunk: (chunk) => fold.add(usageOf(chunk)),
      usage: () => asTokenUsage(fold.tokens()),
    };
  };
  return Object.assign(extract, { streamReader });
}

/**
 * OpenAI Chat Completions (`openai.chat.completions.create`). Streamed, the usage comes in the
 * last chunk, sent only when the request asks for it (`stream_options: { include_usage: true }`;
 * the runguard proxy asks by itself).
 */
export const openaiChatCompletions = extractorOf('openai-chat', (chunk) => fieldsOf(chunk)?.usage);

/** OpenAI Responses API (`openai.responses.create`); streamed, from `response.completed` (or `.incomplete`, `.failed`). */
export const openaiResponses = extractorOf('openai-responses', (event) => fieldsOf(fieldsOf(event)?.response)?.usage);

/**
 * Anthropic Messages (`anthropic.messages.create`). Streamed (`stream: true`, or
 * `anthropic.messages.stream`), input counts come with `message_start` and output counts with
 * `message_delta`.
 */
export const anthropicMessages = extractorOf('anthropic', (event) => {
  const fields = fieldsOf(event);
  if (fields?.type === 'message_start') return fieldsOf(fields.message)?.usage;
  return fields?.type === 'message_delta' ? fields.usage : undefined;
});

/**
 * A reader for an extractor without one of its own: the extractor is called with each chunk, and
 * its last answer counts.
 */
export function chunkwiseReader(extractor: TokenExtractor<never>): StreamUsageReader {
  let latest: TokenCounts | TokenUsage | undefined;
  return {
    onChunk(chunk) {
      try {
        latest = extractor(chunk as never) ?? latest;
      } catch {
        // A faulty extractor means no counts, never a broken stream.
      }
    },
    usage: () => latest,
  };
}

/** The bundled extractors; `openai` is an alias of `openaiChatCompletions`, `anthropic` of `anthropicMessages`. */
export const extractors = Object.freeze({
  openai: openaiChatCompletions,
  openaiChatCompletions,
  openaiResponses,
  anthropic: anthropicMessages,
  anthropicMessages,
});
