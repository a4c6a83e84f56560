/**
 * config/pricing-catalog.json against the dataset it is generated from: the snapshot vendored in
 * data/pricing, so a clone with nothing beside it can check its own catalog.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { isLosslessNumber, parse, type LosslessNumber } from 'lossless-json';
import { beforeAll, describe, expect, it } from 'vitest';
import { callCost, tokenPricesOf } from '../../../src/money/cost.js';
import { decimalText } from '../../../src/money/decimal.js';
import { readShippedCatalog } from '../../../src/money/shipped-catalog.js';
import {
  CATALOG_PATH,
  datasetDir,
  generateCatalog,
  plainDecimal,
  withoutDoubleNoise,
} from '../../../scripts/pricing-catalog.js';

type Json = Record<string, any>;
const dir = datasetDir();
let committedText: string;
let catalog: Json;
let dataset: Record<'openai' | 'anthropic' | 'google', Json>;

beforeAll(async () => {
  committedText = await readFile(CATALOG_PATH, 'utf8');
  catalog = JSON.parse(committedText);
  const read = async (name: string) => parse(await readFile(join(dir, `${name}.json`), 'utf8')) as Json;
  dataset = { openai: await read('openai'), anthropic: await read('anthropic'), google: await read('google') };
});

/** A dataset price in cents as USD, computed here apart from the script: digits and a scale in a bigint. */
function usdOf(entry: Json, unit: string): string | undefined {
  const price = entry?.pricing_config?.pay_as_you_go?.[unit]?.price as LosslessNumber | undefined;
  if (!isLosslessNumber(price)) return undefined;
  const cents = withoutDoubleNoise(plainDecimal(price.value));
  const [whole, fraction = ''] = cents.split('.');
  const digits = BigInt(whole! + fraction);
  const scale = fraction.length + 2; // cents to dollars
  const text = digits.toString().padStart(scale + 1, '0');
  const usd = `${text.slice(0, -scale)}.${text.slice(-scale)}`.replace(/\.?0+$/, '');
  return usd === '' ? '0' : usd;
}

const model = (id: string) => catalog.models.find((m: Json) => m.model === id);
/** The catalog's price as exact decimal text (as the API will store it). */
const exact = (value: number | null) => (value === null ? null : decimalText(value));

describe('the shipped pricing catalog', () => {
  it('when regenerated from the dataset, then it is the committed file, byte for byte', async () => {
    expect(await generateCatalog(dir)).toBe(committedText);
  });

  it('names its source and commit', () => {
    expect(catalog.source).toMatchObject({
      name: 'Portkey-AI/models',
      commit: expect.stringMatching(/^[0-9a-f]{40}$/),
      license: 'MIT',
    });
    expect(catalog.taken_at).toBe(catalog.source.date);
  });

  it.each([
    ['openai', 'gpt-4o-mini', 'gpt-4o-mini'],
    ['openai', 'gpt-4o', 'gpt-4o'],
    ['openai', 'o3', 'o3'],
    ['openai', 'gpt-5.6', 'gpt-5.6'],
    ['openai', 'text-embedding-3-small', 'text-embedding-3-small'],
    ['anthropic', 'claude-sonnet-4-5', 'claude-sonnet-4-5'],
    ['anthropic', 'claude-haiku-4-5-20251001', 'claude-haiku-4-5-20251001'],
    ['anthropic', 'claude-opus-4-1', 'claude-opus-4-1'],
    ['google', 'gemini-2.5-pro', 'gemini-2.5-pro-lte-128k'],
    ['google', 'gemini-2.5-flash-lite', 'gemini-2.5-flash-lite-lte-128k'],
    ['google', 'gemini-embedding-001', 'gemini-embedding-001-lte-128k'],
  ] as const)(
    "when %s %s is read from the dataset, then its prices are the dataset's in USD, exactly",
    (provider, id, key) => {
      const entry = dataset[provider][key];
      const priced = model(id);
      expect(priced).toMatchObject({ provider });
      expect(exact(priced.input_cost_per_token)).toBe(usdOf(entry, 'request_token'));
      expect(exact(priced.output_cost_per_token)).toBe(usdOf(entry, 'response_token'));
      // A cache price of 0 (no price of its own, as OpenAI's older models) reads as null: the input price.
      const cache = (unit: string) => {
        const usd = usdOf(entry, unit);
        return usd === undefined || usd === '0' ? null : usd;
      };
      expect(exact(priced.cache_read_input_cost_per_token)).toBe(cache('cache_read_input_token'));
      expect(exact(priced.cache_write_input_cost_per_token)).toBe(cache('cache_write_input_token'));
    },
  );

  it('when checked by hand against published prices, then the per-million figures are right', () => {
    const perMillion = (value: number | null) => (value === null ? null : Number((value * 1e6).toPrecision(12)));
    const sonnet = model('claude-sonnet-4-5');
    expect(
      [
        sonnet.input_cost_per_token,
        sonnet.output_cost_per_token,
        sonnet.cache_read_input_cost_per_token,
        sonnet.cache_write_input_cost_per_token,
      ].map(perMillion),
    ).toEqual([3, 15, 0.3, 3.75]);
    const mini = model('gpt-4o-mini');
    expect(
      [
        mini.input_cost_per_token,
        mini.output_cost_per_token,
        mini.cache_read_input_cost_per_token,
        mini.cache_write_input_cost_per_token,
      ].map(perMillion),
    ).toEqual([0.15, 0.6, 0.075, null]);
    // The dataset writes 0.00007499999999999999 cents: a double's noise around 0.000075.
    expect(exact(model('gpt-5.4-mini').input_cost_per_token)).toBe('0.00000075');
  });

  it('when every dataset model is looked for, then each chat and embedding model is priced and every other one is listed as left out', () => {
    const priced = new Set(catalog.models.map((m: Json) => `${m.provider}/${m.model}`));
    const left = new Set(catalog.excluded.map((m: Json) => `${m.provider}/${m.model}`));
    for (const [provider, entries] of Object.entries(dataset)) {
      for (const key of Object.keys(entries)) {
        if (key === 'default') continue;
        const id = `${provider}/${key.replace(/-(lte|gt)-\d+k$/, '')}`;
        expect(priced.has(id) || left.has(id), id).toBe(true);
        expect(priced.has(id) && left.has(id), id).toBe(false);
      }
    }
    expect(catalog.models.filter((m: Json) => m.kind === 'embedding').map((m: Json) => m.model)).toEqual(
      expect.arrayContaining(['text-embedding-3-small', 'text-embedding-3-large', 'gemini-embedding-001']),
    );
    for (const m of catalog.excluded) expect(m.reason).not.toBe('');
  });

  it('when a price is read back as the API reads JSON numbers, then no digit drifts', () => {
    const lossless = parse(committedText) as Json;
    for (const m of lossless.models) {
      for (const field of [
        'input_cost_per_token',
        'output_cost_per_token',
        'cache_read_input_cost_per_token',
        'cache_write_input_cost_per_token',
      ]) {
        for (const tier of [m, m.long_context].filter(Boolean)) {
          if (tier[field] === null) continue;
          expect(decimalText(Number(tier[field].value)), `${m.model} ${field}`).toBe(plainDecimal(tier[field].value));
        }
      }
    }
  });

  it('when the server reads the shipped catalog, then every model comes with its prices, ready to price a call exactly', async () => {
    const shipped = await readShippedCatalog();
    expect(shipped.entries).toHaveLength(catalog.models.length);
    expect(shipped.source).toBe(`Portkey-AI/models@${catalog.source.commit}`);
    const sonnet = shipped.entries.find((e) => e.model === 'claude-sonnet-4-5')!;
    // 1,200 x $3/M + 100,000 x $0.30/M + 50,000 x $3.75/M + 800 x $15/M.
    expect(
      callCost(
        { promptTokens: 151_200, completionTokens: 800, cacheReadTokens: 100_000, cacheWriteTokens: 50_000 },
        tokenPricesOf(sonnet),
      ),
    ).toBe('0.2331');
    // Above 200,000 input tokens, cached or not, the whole call at the long-context prices:
    // 1,200 x $6/M + 150,000 x $0.60/M + 50,000 x $7.50/M + 800 x $22.50/M.
    expect(
      callCost(
        { promptTokens: 201_200, completionTokens: 800, cacheReadTokens: 150_000, cacheWriteTokens: 50_000 },
        tokenPricesOf(sonnet),
      ),
    ).toBe('0.4902');
    const gemini = shipped.entries.find((e) => e.model === 'gemini-2.5-pro')!;
    expect(gemini.long_context).toMatchObject({ above_prompt_tokens: 200_000 });
    // 200,000 prompt tokens is not above: $1.25/M in, $10/M out; one more, and it is $2.50 and $15.
    const at = (prompt: number) =>
      callCost(
        { promptTokens: prompt, completionTokens: 1_000, cacheReadTokens: 0, cacheWriteTokens: 0 },
        tokenPricesOf(gemini),
      );
    expect(at(200_000)).toBe('0.26');
    expect(at(200_001)).toBe('0.5150025');
  });

  it.each([
    ['google', 'gemini-2.5-pro', 'gemini-2.5-pro-gt-128k', 200_000],
    ['google', 'gemini-3-pro-preview', 'gemini-3-pro-preview-gt-128k', 200_000],
    ['google', 'gemini-1.5-pro', 'gemini-1.5-pro-gt-128k', 128_000],
  ] as const)(
    "when %s %s has a long-context tier in the dataset, then the catalog has it at the provider's threshold",
    (provider, id, key, above) => {
      const entry = dataset[provider][key];
      const tier = model(id).long_context;
      expect(tier.above_prompt_tokens).toBe(above);
      expect(exact(tier.input_cost_per_token)).toBe(usdOf(entry, 'request_token'));
      expect(exact(tier.output_cost_per_token)).toBe(usdOf(entry, 'response_token'));
      expect(exact(tier.cache_read_input_cost_per_token)).toBe(usdOf(entry, 'cache_read_input_token') ?? null);
      expect(tier.from).toBe(`${provider}/${key}`);
    },
  );

  it("when OpenAI's entry has a context tier map, then the catalog has the tier at the map's threshold", () => {
    const gt =
      dataset.openai['gpt-5.4'].custom_pricing.regions.default.execution_modes.standard.context_tiers['gt-272k'];
    const tier = model('gpt-5.4').long_context;
    expect(tier.above_prompt_tokens).toBe(272_000);
    expect(exact(tier.input_cost_per_token)).toBe(usdOf(gt, 'request_token'));
    expect(exact(tier.output_cost_per_token)).toBe(usdOf(gt, 'response_token'));
    expect(exact(tier.cache_read_input_cost_per_token)).toBe(usdOf(gt, 'cache_read_input_token'));
    // A map with no priced higher tier (gpt-5.4-mini), and equal tiers (gemini-2.5-flash): no tier.
    expect(model('gpt-5.4-mini').long_context).toBeUndefined();
    expect(model('gemini-2.5-flash').long_context).toBeUndefined();
    // Not in the dataset: Claude Sonnet 4.5's, from Anthropic's price list; Opus has none.
    expect(model('claude-sonnet-4-5').long_context).toMatchObject({ above_prompt_tokens: 200_000 });
    expect(model('claude-opus-4-5').long_context).toBeUndefined();
  });
});
