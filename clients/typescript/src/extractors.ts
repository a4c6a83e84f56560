import type { StreamUsageReader, TokenCounts, TokenExtractor, TokenUsage } from './types.js';

/**
 * Ready-made token extractors for provider responses. Each takes the provider SDK's response
 * object and returns a {@link TokenUsage} (prompt tokens counting every input token, with the
 * prompt cache's reads and writes and the reasoning tokens as parts), or undefined when the
 * response carries no usage (a mocked call, a proxy that strips it). Each also reads a stream's
 * chunks (`streamReader`), for calls that return one. They are typed structurally so that this
 * package does not depend on any provider SDK.
 */

type Fields = Record<string, unknown>;

const fieldsOf = (value: unknown): Fields | undefined =>
  typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Fields) : undefined;

/** A usable token count: a non-negative safe integer. */
export function isTokenCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

const countOf = (value: unknown): number | null => (isTokenCount(value) ? value : null);

/**
 * OpenAI's counts (chat: `prompt_tokens`, `completion_tokens`, `prompt_tokens_details`,
 * `completion_tokens_details`; Responses: `input_tokens`, ...): the cached parts are already
 * inside the totals.
 */
function openaiUsage(
  usage: unknown,
  names: { prompt: string; completion: string; input: string; output: string },
): TokenUsage | undefined {
  const u = fieldsOf(usage);
  const prompt = countOf(u?.[names.prompt]);
  const completion = countOf(u?.[names.completion]);
  if (prompt === null || completion === null) return undefined;
  const input = fieldsOf(u?.[names.input]);
  return {
    promptTokens: prompt,
    completionTokens: completion,
    cacheReadTokens: countOf(input?.cached_tokens),
    cacheWriteTokens: countOf(input?.cache_write_tokens),
    reasoningTokens: countOf(fieldsOf(u?.[names.output])?.reasoning_tokens),
  };
}

const CHAT = {
  prompt: 'prompt_tokens',
  completion: 'completion_tokens',
  input: 'prompt_tokens_details',
  output: 'completion_tokens_details',
};
const RESPONSES = {
  prompt: 'input_tokens',
  completion: 'output_tokens',
  input: 'input_tokens_details',
  output: 'output_tokens_details',
};

/** A stream reader where the latest usage seen wins (usage is cumulative, reported once or growing). */
function latestOf(read: (chunk: unknown) => TokenUsage | undefined): () => StreamUsageReader {
  return () => {
    let latest: TokenUsage | undefined;
    return {
      onChunk(chunk) {
        latest = read(chunk) ?? latest;
      },
      usage: () => latest,
    };
  };
}

function withStream<F extends (response: unknown) => TokenUsage | undefined>(
  extract: F,
  streamReader: () => StreamUsageReader,
) {
  return Object.assign(extract, { streamReader }) as F & { streamReader: () => StreamUsageReader };
}

/**
 * OpenAI Chat Completions (`openai.chat.completions.create`). Streamed, the usage comes in the
 * last chunk, sent only when the request asks for it (`stream_options: { include_usage: true }`;
 * the runguard proxy asks by itself).
 */
export const openaiChatCompletions = withStream(
  (response: unknown): TokenUsage | undefined => openaiUsage(fieldsOf(response)?.usage, CHAT),
  latestOf((chunk) => openaiUsage(fieldsOf(chunk)?.usage, CHAT)),
);

/** OpenAI Responses API (`openai.responses.create`); streamed, from `response.completed` (or `.incomplete`, `.failed`). */
export const openaiResponses = withStream(
  (response: unknown): TokenUsage | undefined => openaiUsage(fieldsOf(response)?.usage, RESPONSES),
  latestOf((event) => openaiUsage(fieldsOf(fieldsOf(event)?.response)?.usage, RESPONSES)),
);

/** Anthropic's counts: whole-message totals, each omitted when it does not apply. */
interface AnthropicCounts {
  input: number | null;
  cacheRead: number | null;
  cacheWrite: number | null;
  output: number | null;
  thinking: number | null;
}

const NO_COUNTS: AnthropicCounts = { input: null, cacheRead: null, cacheWrite: null, output: null, thinking: null };

/** Later counts overwrite earlier ones, never add (as Anthropic's own SDK merges `message_delta`). */
function mergeAnthropic(counts: AnthropicCounts, usage: unknown): AnthropicCounts {
  const u = fieldsOf(usage);
  if (!u) return counts;
  return {
    input: countOf(u.input_tokens) ?? counts.input,
    cacheRead: countOf(u.cache_read_input_tokens) ?? counts.cacheRead,
    cacheWrite: countOf(u.cache_creation_input_tokens) ?? counts.cacheWrite,
    output: countOf(u.output_tokens) ?? counts.output,
    thinking: countOf(fieldsOf(u.output_tokens_details)?.thinking_tokens) ?? counts.thinking,
  };
}

/**
 * Anthropic's `input_tokens` excludes the prompt cache's reads and writes, both billed as input:
 * prompt tokens are the three together, so that they mean every input token, as OpenAI's do
 * and as the proxy counts them; the reads and writes are kept apart to be priced at their prices.
 */
function anthropicUsage(c: AnthropicCounts): TokenUsage | undefined {
  if (c.input === null || c.output === null) return undefined;
  return {
    promptTokens: c.input + (c.cacheRead ?? 0) + (c.cacheWrite ?? 0),
    completionTokens: c.output,
    cacheReadTokens: c.cacheRead,
    cacheWriteTokens: c.cacheWrite,
    reasoningTokens: c.thinking,
  };
}

/**
 * Anthropic Messages (`anthropic.messages.create`). Streamed (`stream: true`, or
 * `anthropic.messages.stream`), input counts come with `message_start` and output counts with
 * `message_delta`.
 */
export const anthropicMessages = withStream(
  (response: unknown): TokenUsage | undefined => anthropicUsage(mergeAnthropic(NO_COUNTS, fieldsOf(response)?.usage)),
  () => {
    let counts = NO_COUNTS;
    return {
      onChunk(event) {
        const e = fieldsOf(event);
        if (e?.type === 'message_start') counts = mergeAnthropic(counts, fieldsOf(e.message)?.usage);
        else if (e?.type === 'message_delta') counts = mergeAnthropic(counts, e.usage);
      },
      usage: () => anthropicUsage(counts),
    };
  },
);

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
