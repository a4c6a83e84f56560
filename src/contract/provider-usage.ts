/**
 * Each provider's usage object mapped to a step's token fields: once, for the proxy (which reads
 * it from the bodies and streams it forwards) and the SDK (which reads it from what the provider's
 * SDK returned). Pure and without imports: the SDK package carries a copy of this file.
 *
 * Our fields mean what OpenAI's do: `promptTokens` is every input token, the prompt cache's reads
 * and writes included as parts of it; `reasoningTokens` is a part of `completionTokens`.
 */

/** A call's token counts in our fields; null: the provider did not report it. */
export interface TokenFields {
  promptTokens: number | null;
  completionTokens: number | null;
  cacheReadTokens: number | null;
  cacheWriteTokens: number | null;
  reasoningTokens: number | null;
}

/** The usage objects we read, by where they come from. */
export type UsageFormat =
  /** OpenAI Chat Completions and legacy completions (and the compatible APIs: vLLM, Ollama...). */
  | 'openai-chat'
  /** OpenAI Responses API: the same counts under other names. */
  | 'openai-responses'
  /** OpenAI embeddings: input only. */
  | 'openai-embeddings'
  /** Anthropic Messages. */
  | 'anthropic'
  /** Google's Gemini API (`usageMetadata`). */
  | 'google';

/** Nothing reported. */
export const NO_TOKENS: Readonly<TokenFields> = Object.freeze({
  promptTokens: null,
  completionTokens: null,
  cacheReadTokens: null,
  cacheWriteTokens: null,
  reasoningTokens: null,
});

/** The largest count read: the contract's `Count` maximum (money/cost.ts re-exports it). */
export const MAX_TOKEN_COUNT = 1_000_000_000_000;

/** A token count: a whole number from 0 to MAX_TOKEN_COUNT, else null (not reported). */
export function tokenCount(value: unknown): number | null {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && value <= MAX_TOKEN_COUNT
    ? value
    : null;
}

type Fields = Record<string, unknown>;

const fieldsOf = (value: unknown): Fields | undefined =>
  typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Fields) : undefined;

/** Where an OpenAI API puts its counts; the cache's reads and writes are already inside the input count. */
const openaiUnder =
  (input: string, output: string, inputDetails: string, outputDetails: string) =>
  (usage: Fields): TokenFields => {
    const details = fieldsOf(usage[inputDetails]);
    return {
      promptTokens: tokenCount(usage[input]),
      completionTokens: tokenCount(usage[output]),
      cacheReadTokens: tokenCount(details?.cached_tokens),
      cacheWriteTokens: tokenCount(details?.cache_write_tokens),
      reasoningTokens: tokenCount(fieldsOf(usage[outputDetails])?.reasoning_tokens),
    };
  };

/** Anthropic's counts as it reports them, each a whole-message total omitted when it does not apply. */
interface AnthropicCounts {
  input: number | null;
  cacheRead: number | null;
  cacheWrite: number | null;
  output: number | null;
  thinking: number | null;
}

const NO_ANTHROPIC_COUNTS: AnthropicCounts = {
  input: null,
  cacheRead: null,
  cacheWrite: null,
  output: null,
  thinking: null,
};

/** Later counts overwrite earlier ones, never add (as Anthropic's own SDK merges `message_delta`). */
function mergeAnthropic(counts: AnthropicCounts, usage: Fields): AnthropicCounts {
  return {
    input: tokenCount(usage.input_tokens) ?? counts.input,
    cacheRead: tokenCount(usage.cache_read_input_tokens) ?? counts.cacheRead,
    cacheWrite: tokenCount(usage.cache_creation_input_tokens) ?? counts.cacheWrite,
    output: tokenCount(usage.output_tokens) ?? counts.output,
    thinking: tokenCount(fieldsOf(usage.output_tokens_details)?.thinking_tokens) ?? counts.thinking,
  };
}

/**
 * Anthropic's `input_tokens` leaves out the prompt cache's reads and writes, both billed as input:
 * our prompt tokens are the three together, with the reads and writes kept apart as its parts.
 */
function anthropicFields(counts: AnthropicCounts): TokenFields {
  return {
    promptTokens: counts.input === null ? null : counts.input + (counts.cacheRead ?? 0) + (counts.cacheWrite ?? 0),
    completionTokens: counts.output,
    cacheReadTokens: counts.cacheRead,
    cacheWriteTokens: counts.cacheWrite,
    reasoningTokens: counts.thinking,
  };
}

const READERS: Record<Exclude<UsageFormat, 'anthropic'>, (usage: Fields) => TokenFields> = {
  'openai-chat': openaiUnder(
    'prompt_tokens',
    'completion_tokens',
    'prompt_tokens_details',
    'completion_tokens_details',
  ),
  'openai-responses': openaiUnder('input_tokens', 'output_tokens', 'input_tokens_details', 'output_tokens_details'),
  /**
   * Gemini's `promptTokenCount` is every input token, its cache's reads (`cachedContentTokenCount`)
   * included; a tool's prompt (`toolUsePromptTokenCount`) comes apart. `candidatesTokenCount`
   * leaves out the thinking (`thoughtsTokenCount`), which is billed as output.
   */
  google: (usage) => {
    const prompt = tokenCount(usage.promptTokenCount);
    const toolPrompt = tokenCount(usage.toolUsePromptTokenCount);
    const candidates = tokenCount(usage.candidatesTokenCount);
    const thoughts = tokenCount(usage.thoughtsTokenCount);
    return {
      promptTokens: prompt === null && toolPrompt === null ? null : (prompt ?? 0) + (toolPrompt ?? 0),
      completionTokens: candidates === null && thoughts === null ? null : (candidates ?? 0) + (thoughts ?? 0),
      cacheReadTokens: tokenCount(usage.cachedContentTokenCount),
      cacheWriteTokens: null,
      reasoningTokens: thoughts,
    };
  },
  'openai-embeddings': (usage) => ({
    ...NO_TOKENS,
    promptTokens: tokenCount(usage.prompt_tokens),
    completionTokens: 0,
  }),
};

/** One usage object (a body's or an event's `usage`) in our fields; undefined when it is not an object. */
export function tokensFromUsage(format: UsageFormat, usage: unknown): TokenFields | undefined {
  const fields = fieldsOf(usage);
  if (!fields) return undefined;
  return format === 'anthropic'
    ? anthropicFields(mergeAnthropic(NO_ANTHROPIC_COUNTS, fields))
    : READERS[format](fields);
}

/** Folds the usage objects of one streamed answer, in the order they came. */
export interface UsageFold {
  add(usage: unknown): void;
  /** The counts so far; undefined while no usage object came. */
  tokens(): TokenFields | undefined;
}

/**
 * A fold for one stream. OpenAI's (and Gemini's) usage is cumulative and comes whole: the latest object wins.
 * Anthropic's comes in parts (`message_start` the input, `message_delta` the running output):
 * each count is the latest given.
 */
export function usageFold(format: UsageFormat): UsageFold {
  if (format === 'anthropic') {
    let counts: AnthropicCounts | undefined;
    return {
      add(usage) {
        const fields = fieldsOf(usage);
        if (fields) counts = mergeAnthropic(counts ?? NO_ANTHROPIC_COUNTS, fields);
      },
      tokens: () => (counts ? anthropicFields(counts) : undefined),
    };
  }
  let latest: TokenFields | undefined;
  return {
    add(usage) {
      latest = tokensFromUsage(format, usage) ?? latest;
    },
    tokens: () => latest,
  };
}
