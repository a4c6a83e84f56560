/**
 * The upper bound of a model call's cost (issue #34, part 3): from the request's size and output
 * limit and the model's prices, by the one cost rule, rounded up.
 */
import { describe, expect, it } from 'vitest';
import {
  estimateCallMicros,
  FALLBACK_MAX_OUTPUT_TOKENS,
  maxOutputTokens,
  outputTokenBound,
} from '../../../src/money/call-estimate.js';
import { costToMicros, type TokenPrices } from '../../../src/money/cost.js';

const PRICES: TokenPrices = { input: '0.00001', output: '0.00004', cacheRead: null, cacheWrite: null };

describe('estimateCallMicros', () => {
  it('when the request sets max_tokens, then input bytes and that limit are priced', () => {
    // 1,000 bytes at $10/M + 200 tokens at $40/M = $0.01 + $0.008
    expect(estimateCallMicros({ inputTokens: 1_000, maxOutputTokens: 200, choices: 1 }, 'gpt-4o', PRICES)).toBe(18_000);
  });

  it('when the request sets no limit, then the model family’s maximum output is priced', () => {
    const bounds = { inputTokens: 0, maxOutputTokens: null, choices: 1 };
    expect(estimateCallMicros(bounds, 'gpt-4o-mini-2024-07-18', PRICES)).toBe(16_384 * 40);
    expect(estimateCallMicros(bounds, 'claude-3-7-sonnet-20250219', PRICES)).toBe(64_000 * 40);
  });

  it('when the request asks for n completions, then each may reach the limit', () => {
    expect(outputTokenBound({ inputTokens: 0, maxOutputTokens: 100, choices: 3 }, 'gpt-4o')).toBe(300);
  });

  it('when a cache write costs more than input, then input is priced at the dearest price', () => {
    const prices: TokenPrices = {
      input: '0.000003',
      output: '0.000015',
      cacheRead: '0.0000003',
      cacheWrite: '0.00000375',
    };
    expect(estimateCallMicros({ inputTokens: 1_000, maxOutputTokens: 0, choices: 1 }, 'claude-sonnet-4', prices)).toBe(
      3_750,
    );
  });

  it('when the exact cost has a fraction of a microdollar, then it is rounded up', () => {
    expect(costToMicros('0.0000001', 'up')).toBe(1n);
    expect(costToMicros('0.0000010', 'up')).toBe(1n);
    expect(costToMicros('0.00000100001', 'up')).toBe(2n);
    expect(estimateCallMicros({ inputTokens: 1, maxOutputTokens: 0, choices: 1 }, 'gpt-4o', PRICES)).toBe(10);
    const tiny: TokenPrices = { input: '0.00000015', output: '0.0000006', cacheRead: null, cacheWrite: null };
    expect(estimateCallMicros({ inputTokens: 1, maxOutputTokens: 1, choices: 1 }, 'gpt-4o-mini', tiny)).toBe(1);
  });

  it('when the input bound is above a long-context threshold, then each price is the dearer tier’s', () => {
    // gemini-2.5-pro: $1.25 / $10 per million; above 200,000 prompt tokens $2.50 / $15, cache reads $0.25.
    const gemini: TokenPrices = {
      input: '0.00000125',
      output: '0.00001',
      cacheRead: '0.000000125',
      cacheWrite: null,
      longContext: {
        abovePromptTokens: 200_000,
        input: '0.0000025',
        output: '0.000015',
        cacheRead: '0.00000025',
        cacheWrite: null,
      },
    };
    const bounds = (inputTokens: number) => ({ inputTokens, maxOutputTokens: 1_000, choices: 1 });
    // At the threshold the call cannot be long: 200,000 x $1.25/M + 1,000 x $10/M = $0.26.
    expect(estimateCallMicros(bounds(200_000), 'gemini-2.5-pro', gemini)).toBe(260_000);
    // One byte more may be: 200,001 x $2.50/M + 1,000 x $15/M = $0.5150025, rounded up.
    expect(estimateCallMicros(bounds(200_001), 'gemini-2.5-pro', gemini)).toBe(515_003);
    // A tier cheaper than the standard one (no provider has one) never lowers the bound.
    const cheaperLong = { ...gemini, longContext: { ...gemini.longContext!, input: '0.000001', output: '0.000001' } };
    expect(estimateCallMicros(bounds(300_000), 'gemini-2.5-pro', cheaperLong)).toBe(385_000);
  });

  it('when the estimate passes the cap, then it is the cap', () => {
    expect(estimateCallMicros({ inputTokens: 10 ** 9, maxOutputTokens: 0, choices: 1 }, 'gpt-4o', PRICES, 5)).toBe(5);
  });
});

describe('maxOutputTokens', () => {
  it('when the model is known by a prefix, then the longest prefix wins', () => {
    expect(maxOutputTokens('gpt-4')).toBe(8_192);
    expect(maxOutputTokens('gpt-4o-2024-08-06')).toBe(16_384);
    expect(maxOutputTokens('gpt-4.1-mini')).toBe(32_768);
    expect(maxOutputTokens('o3-mini')).toBe(100_000);
    expect(maxOutputTokens('openai/gpt-4o')).toBe(16_384);
  });

  it('when the model is unknown, then the documented fallback applies', () => {
    expect(maxOutputTokens('llama3:8b')).toBe(FALLBACK_MAX_OUTPUT_TOKENS);
  });
});
