/**
 * src/contract/provider-usage.ts maps each provider's usage object to a step's token fields, for
 * the proxy and the SDK alike: one table of usage objects, read by the module, by the proxy's
 * adapters (from a JSON body) and by the SDK's extractors (from an SDK's response).
 */
import { describe, expect, it } from 'vitest';
import { extractors } from '../../clients/typescript/src/index.js';
import { Count } from '../../src/contract/common.js';
import {
  MAX_TOKEN_COUNT,
  NO_TOKENS,
  tokenCount,
  tokensFromUsage,
  usageFold,
  type TokenFields,
  type UsageFormat,
} from '../../src/contract/provider-usage.js';
import { adapterFor, type ProviderType } from '../../src/proxy/providers/index.js';
import { bytes, track } from '../proxy/chunks.js';

const tokens = (fields: Partial<TokenFields>): TokenFields => ({ ...NO_TOKENS, ...fields });

interface Row {
  name: string;
  format: UsageFormat;
  usage: unknown;
  expected: TokenFields | undefined;
}

const TABLE: Row[] = [
  {
    name: 'OpenAI chat: totals only',
    format: 'openai-chat',
    usage: { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 },
    expected: tokens({ promptTokens: 12, completionTokens: 5 }),
  },
  {
    name: 'OpenAI chat: cache reads and writes inside the prompt, reasoning inside the completion',
    format: 'openai-chat',
    usage: {
      prompt_tokens: 50,
      completion_tokens: 20,
      prompt_tokens_details: { cached_tokens: 30, cache_write_tokens: 4 },
      completion_tokens_details: { reasoning_tokens: 8 },
    },
    expected: tokens({
      promptTokens: 50,
      completionTokens: 20,
      cacheReadTokens: 30,
      cacheWriteTokens: 4,
      reasoningTokens: 8,
    }),
  },
  {
    name: 'OpenAI chat: a negative, fractional or absurd count is not a count',
    format: 'openai-chat',
    usage: { prompt_tokens: -1, completion_tokens: 2.5, prompt_tokens_details: { cached_tokens: MAX_TOKEN_COUNT + 1 } },
    expected: tokens({}),
  },
  {
    name: 'OpenAI Responses: the same counts under other names',
    format: 'openai-responses',
    usage: {
      input_tokens: 40,
      output_tokens: 9,
      input_tokens_details: { cached_tokens: 16 },
      output_tokens_details: { reasoning_tokens: 3 },
    },
    expected: tokens({ promptTokens: 40, completionTokens: 9, cacheReadTokens: 16, reasoningTokens: 3 }),
  },
  {
    name: 'OpenAI embeddings: input only, no output',
    format: 'openai-embeddings',
    usage: { prompt_tokens: 8, total_tokens: 8 },
    expected: tokens({ promptTokens: 8, completionTokens: 0 }),
  },
  {
    name: "Anthropic: the cache's reads and writes added to input_tokens, kept apart as its parts",
    format: 'anthropic',
    usage: {
      input_tokens: 5,
      output_tokens: 2,
      cache_creation_input_tokens: 7,
      cache_read_input_tokens: 9,
      output_tokens_details: { thinking_tokens: 1 },
    },
    expected: tokens({
      promptTokens: 21,
      completionTokens: 2,
      cacheReadTokens: 9,
      cacheWriteTokens: 7,
      reasoningTokens: 1,
    }),
  },
  {
    name: 'Anthropic: no input count, no prompt tokens',
    format: 'anthropic',
    usage: { output_tokens: 3 },
    expected: tokens({ completionTokens: 3 }),
  },
  { name: 'no usage object', format: 'openai-chat', usage: null, expected: undefined },
  { name: 'usage that is not an object', format: 'anthropic', usage: [1, 2], expected: undefined },
];

/** Where the proxy reads each format, and the SDK extractor for it. */
const READERS: Record<UsageFormat, { provider: ProviderType; path: string; sdk?: (response: unknown) => unknown }> = {
  'openai-chat': { provider: 'openai', path: '/v1/chat/completions', sdk: extractors.openaiChatCompletions },
  'openai-responses': { provider: 'openai', path: '/v1/responses', sdk: extractors.openaiResponses },
  'openai-embeddings': { provider: 'openai', path: '/v1/embeddings' },
  anthropic: { provider: 'anthropic', path: '/v1/messages', sdk: extractors.anthropicMessages },
};

describe('provider usage, table-driven', () => {
  it.each(TABLE)('when the module reads $name, then it gives our token fields', ({ format, usage, expected }) => {
    expect(tokensFromUsage(format, usage)).toEqual(expected);
  });

  it.each(TABLE)('when the proxy reads a JSON body with $name, then it records the same fields', (row) => {
    const { provider, path } = READERS[row.format];
    const tracker = adapterFor(provider).usageTracker(path, 'application/json');
    expect(track(tracker, [bytes(JSON.stringify({ model: 'm', usage: row.usage }))])).toEqual(
      row.expected ?? NO_TOKENS,
    );
  });

  it.each(TABLE.filter((row) => READERS[row.format].sdk))(
    'when the SDK reads a response with $name, then its extractor gives the same counts',
    ({ format, usage, expected }) => {
      const complete = expected?.promptTokens != null && expected.completionTokens != null;
      // The SDK answers nothing unless both totals are there.
      expect(READERS[format].sdk!({ usage })).toEqual(complete ? expected : undefined);
    },
  );

  it("when a count is read, then it is a whole number from 0 to the contract's Count maximum", () => {
    expect(MAX_TOKEN_COUNT).toBe(Count.maximum);
    expect([0, 7, MAX_TOKEN_COUNT].map(tokenCount)).toEqual([0, 7, MAX_TOKEN_COUNT]);
    expect([-1, 1.5, MAX_TOKEN_COUNT + 1, '7', null, Number.NaN].map(tokenCount)).toEqual([
      null,
      null,
      null,
      null,
      null,
      null,
    ]);
  });
});

describe('provider usage of a stream, folded', () => {
  it('when OpenAI sends usage more than once, then the latest object wins whole', () => {
    const fold = usageFold('openai-chat');
    expect(fold.tokens()).toBeUndefined();
    fold.add(null); // every delta's `"usage": null`
    fold.add({ prompt_tokens: 3, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 2 } });
    fold.add({ prompt_tokens: 3, completion_tokens: 4 });
    expect(fold.tokens()).toEqual(tokens({ promptTokens: 3, completionTokens: 4 }));
  });

  it("when Anthropic sends message_start's then message_delta's usage, then each count is the latest given", () => {
    const fold = usageFold('anthropic');
    fold.add({ input_tokens: 10, cache_read_input_tokens: 4, output_tokens: 1 });
    fold.add({ output_tokens: 6 });
    fold.add('not usage');
    expect(fold.tokens()).toEqual(tokens({ promptTokens: 14, completionTokens: 6, cacheReadTokens: 4 }));
  });
});
