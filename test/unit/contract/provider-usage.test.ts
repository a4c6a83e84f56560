/**
 * src/contract/provider-usage.ts maps each provider's usage object to a step's token fields, for
 * the proxy and the SDK alike: one table of usage objects (test/fixtures/provider-usage.json),
 * read by the module, by the proxy's adapters (from a JSON body) and by the SDK's extractors (from
 * an SDK's response); the Python client's tests read it with its extractors.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { extractors } from '../../../clients/typescript/src/index.js';
import { Count } from '../../../src/contract/common.js';
import {
  MAX_TOKEN_COUNT,
  NO_TOKENS,
  tokenCount,
  tokensFromUsage,
  usageFold,
  type TokenFields,
  type UsageFormat,
} from '../../../src/contract/provider-usage.js';
import { adapterFor, type ProviderType } from '../../../src/proxy/providers/index.js';
import { bytes, track } from '../../proxy/chunks.js';

const tokens = (fields: Partial<TokenFields>): TokenFields => ({ ...NO_TOKENS, ...fields });

interface Row {
  name: string;
  format: UsageFormat;
  usage: unknown;
  expected: TokenFields | null;
}

/** Shared with the Python client's tests (clients/python/tests/test_provider_usage.py). */
const TABLE = (
  JSON.parse(readFileSync(join(import.meta.dirname, '../../fixtures/provider-usage.json'), 'utf8')) as { rows: Row[] }
).rows;

/** Where the proxy reads each format (the body's member that holds usage), and the SDK extractor for it. */
const READERS: Record<
  UsageFormat,
  { provider: ProviderType; path: string; member?: string; sdk?: (response: unknown) => unknown }
> = {
  'openai-chat': { provider: 'openai', path: '/v1/chat/completions', sdk: extractors.openaiChatCompletions },
  'openai-responses': { provider: 'openai', path: '/v1/responses', sdk: extractors.openaiResponses },
  'openai-embeddings': { provider: 'openai', path: '/v1/embeddings' },
  anthropic: { provider: 'anthropic', path: '/v1/messages', sdk: extractors.anthropicMessages },
  google: { provider: 'google', path: '/v1beta/models/gemini-2.5-flash:generateContent', member: 'usageMetadata' },
};

describe('provider usage, table-driven', () => {
  it.each(TABLE)('when the module reads $name, then it gives our token fields', ({ format, usage, expected }) => {
    expect(tokensFromUsage(format, usage)).toEqual(expected ?? undefined);
  });

  it.each(TABLE)('when the proxy reads a JSON body with $name, then it records the same fields', (row) => {
    const { provider, path, member = 'usage' } = READERS[row.format];
    const tracker = adapterFor(provider).usageTracker(path, 'application/json');
    expect(track(tracker, [bytes(JSON.stringify({ model: 'm', [member]: row.usage }))])).toEqual(
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
