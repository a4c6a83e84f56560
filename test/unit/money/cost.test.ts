/**
 * The cost rule on hand-computed cases. test/money/cost-sql.test.ts holds `callCost` to `costSql`
 * (what Postgres computes when it stores a step's result) on random counts and prices.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  callCost,
  callCostMicros,
  costToMicros,
  formatDecimal,
  parseDecimal,
  priceDecimal,
  type CallTokens,
  type TokenPrices,
} from '../../../src/money/cost.js';

const tokens = (t: Partial<CallTokens>): CallTokens => ({
  promptTokens: null,
  completionTokens: null,
  cacheReadTokens: null,
  cacheWriteTokens: null,
  ...t,
});
// claude-sonnet-4-5: $3 / $15 per million, cache reads $0.30, 5-minute cache writes $3.75.
const SONNET: TokenPrices = { input: '0.000003', output: '0.000015', cacheRead: '0.0000003', cacheWrite: '0.00000375' };
// gpt-4o-mini: $0.15 / $0.60 per million, cached input $0.075, no write price.
const MINI: TokenPrices = { input: '0.00000015', output: '0.0000006', cacheRead: '0.000000075', cacheWrite: null };

describe('callCost, against hand computations', () => {
  it('when an Anthropic call reads and writes the cache, then each part is priced at its own price', () => {
    // 1,200 uncached x 0.000003 = 0.0036; 150,000 reads x 0.0000003 = 0.045;
    // 50,000 writes x 0.00000375 = 0.1875; 800 out x 0.000015 = 0.012. Sum: 0.2481.
    const call = tokens({
      promptTokens: 1_200 + 150_000 + 50_000,
      completionTokens: 800,
      cacheReadTokens: 150_000,
      cacheWriteTokens: 50_000,
    });
    expect(callCost(call, SONNET)).toBe('0.2481');
    // All of it at the input price, as before: 201,200 x 0.000003 + 0.012 = 0.6156 (2.5 times as much).
    expect(callCost(call, { ...SONNET, cacheRead: null, cacheWrite: null })).toBe('0.6156');
  });

  it('when an OpenAI call has cached tokens, then they are the cheaper part of prompt_tokens', () => {
    // (2,006 - 1,920) x 0.00000015 = 0.0000129; 1,920 x 0.000000075 = 0.000144; 300 x 0.0000006 = 0.00018.
    expect(callCost(tokens({ promptTokens: 2_006, completionTokens: 300, cacheReadTokens: 1_920 }), MINI)).toBe(
      '0.0003369',
    );
  });

  it('when reasoning tokens are part of the completion, then the completion is priced whole, once', () => {
    // o3-like: 1,000 in x 0.000002 + 5,000 out (4,500 of them reasoning) x 0.000008 = 0.042.
    const o3: TokenPrices = { input: '0.000002', output: '0.000008', cacheRead: '0.0000005', cacheWrite: null };
    expect(callCost(tokens({ promptTokens: 1_000, completionTokens: 5_000 }), o3)).toBe('0.042');
  });

  it('when the prompt is above a long-context threshold, then every token of the call costs the long prices', () => {
    // gemini-2.5-pro: $1.25 / $10 per million, cache reads $0.125; above 200,000 prompt tokens
    // $2.50 / $15, cache reads $0.25 (cached tokens count toward the threshold).
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
    // 150,000 uncached x 0.00000125 + 50,000 reads x 0.000000125 + 2,000 out x 0.00001 = 0.21375.
    const at = (prompt: number) =>
      callCost(tokens({ promptTokens: prompt, completionTokens: 2_000, cacheReadTokens: 50_000 }), gemini);
    expect(at(200_000)).toBe('0.21375');
    // 150,001 x 0.0000025 + 50,000 x 0.00000025 + 2,000 x 0.000015 = 0.4175025.
    expect(at(200_001)).toBe('0.4175025');
    // The long tier's cache writes without a price of their own: its input price.
    expect(callCost(tokens({ promptTokens: 300_000, cacheWriteTokens: 100_000 }), gemini)).toBe('0.75');
  });

  it('when a cache write has no price of its own, then it costs the input price', () => {
    expect(callCost(tokens({ promptTokens: 1_000, cacheWriteTokens: 1_000 }), MINI)).toBe('0.00015');
  });

  it('when no count is known, then the cost is unknown; when counts contradict, uncached input is never negative', () => {
    expect(callCost(tokens({}), MINI)).toBeNull();
    expect(callCost(tokens({ promptTokens: 10, cacheReadTokens: 30 }), MINI)).toBe('0.00000225');
  });

  it('when a cost is rounded to microdollars, then it rounds half up', () => {
    expect(costToMicros('0.2481')).toBe(248_100n);
    expect(costToMicros('0.0000005')).toBe(1n);
    expect(costToMicros('0.00000049999')).toBe(0n);
    expect(costToMicros('12')).toBe(12_000_000n);
  });

  it('parses and formats decimals exactly', () => {
    expect(formatDecimal(parseDecimal('0.000000150'))).toBe('0.00000015');
    expect(formatDecimal(parseDecimal('007'))).toBe('7');
    expect(() => parseDecimal('1e-7')).toThrow(RangeError);
  });
});

describe('callCostMicros, against the cost as text', () => {
  const count = fc.option(fc.integer({ min: 0, max: 2_000_000_000 }), { nil: null });
  const price = fc
    .tuple(fc.bigInt({ min: 0n, max: 10n ** 20n }), fc.integer({ min: 0, max: 30 }))
    .map(([digits, scale]) => formatDecimal({ digits, scale }));
  const tier = fc.record({
    input: price,
    output: price,
    cacheRead: fc.option(price, { nil: null }),
    cacheWrite: fc.option(price, { nil: null }),
  });

  it('when counts and prices are random, then it is the text cost rounded half-up, or up', () => {
    fc.assert(
      fc.property(
        fc.record({ promptTokens: count, completionTokens: count, cacheReadTokens: count, cacheWriteTokens: count }),
        tier,
        fc.option(fc.tuple(fc.integer({ min: 0, max: 2_000_000_000 }), tier), { nil: null }),
        (t, standard, long) => {
          const p: TokenPrices = {
            ...standard,
            longContext: long && { abovePromptTokens: long[0], ...long[1] },
          };
          const cost = callCost(t, p);
          expect(callCostMicros(t, p)).toBe(cost === null ? null : costToMicros(cost));
          expect(callCostMicros(t, p, 'up')).toBe(cost === null ? null : costToMicros(cost, 'up'));
          if (cost !== null) {
            // Up is a ceiling: at or above the exact cost, by less than a microdollar (all at one scale).
            const exact = parseDecimal(cost);
            const scale = Math.max(exact.scale, 6);
            const up = callCostMicros(t, p, 'up')! * 10n ** BigInt(scale - 6);
            const digits = exact.digits * 10n ** BigInt(scale - exact.scale);
            expect(up >= digits && up - digits < 10n ** BigInt(scale - 6)).toBe(true);
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  it('when a price is parsed again, then it is the same decimal', () => {
    expect(priceDecimal('0.000000150')).toEqual(parseDecimal('0.000000150'));
    expect(priceDecimal('0.000000150')).toBe(priceDecimal('0.000000150'));
    expect(() => priceDecimal('1e-7')).toThrow(RangeError);
  });
});
