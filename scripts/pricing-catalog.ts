/**
 * Generates config/pricing-catalog.json from a snapshot of the Portkey-AI/models pricing dataset
 * (`openai.json`, `anthropic.json`, `google.json` and its README, which names the commit).
 *
 *   npm run pricing:catalog                       # dataset at data/pricing (vendored in this repository)
 *   npm run pricing:catalog -- --dataset DIR      # or RUNGUARD_PRICING_DATASET=DIR
 *   npm run pricing:catalog -- --check            # exit 1 when the committed catalog is not what DIR gives
 *
 * The dataset's prices are US cents per token; the catalog's are USD per token. The conversion
 * moves the decimal point of the dataset's own number text two places (never a binary double),
 * and the catalog writes that text as its JSON number: exact, as a JSON number of up to 17
 * significant digits reads back (see src/money/decimal.ts).
 */
import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { isLosslessNumber, LosslessNumber, parse, stringify } from 'lossless-json';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const DEFAULT_DATASET = 'data/pricing';
export const CATALOG_PATH = join(REPO_ROOT, 'config', 'pricing-catalog.json');
const PROVIDERS = ['openai', 'anthropic', 'google'] as const;
type Provider = (typeof PROVIDERS)[number];

/** The dataset folder: `--dataset DIR`, else RUNGUARD_PRICING_DATASET, else data/pricing in this repository. */
export function datasetDir(argv: readonly string[] = [], env: NodeJS.ProcessEnv = {}): string {
  const at = argv.indexOf('--dataset');
  const given = at >= 0 ? argv[at + 1] : env.RUNGUARD_PRICING_DATASET;
  return resolve(REPO_ROOT, given || DEFAULT_DATASET);
}

// --- Exact decimal text ---------------------------------------------------------------------

/**
 * A number's JSON text as plain decimal text (`1.5e-05` becomes `0.000015`), exact: digits and
 * the decimal point are moved, never computed.
 */
export function plainDecimal(text: string): string {
  const match = /^(\d+)(?:\.(\d*))?(?:[eE]([-+]?\d+))?$/.exec(text);
  if (!match) throw new RangeError(`not a non-negative JSON number: ${text}`);
  const digits = match[1]! + (match[2] ?? '');
  const point = match[1]!.length + Number(match[3] ?? 0); // where the point goes in `digits`
  const whole = point <= 0 ? '0' : digits.slice(0, point).padEnd(point, '0');
  const fraction = point < 0 ? '0'.repeat(-point) + digits : digits.slice(Math.max(point, 0));
  const cleanWhole = whole.replace(/^0+(?=\d)/, '');
  const cleanFraction = fraction.replace(/0+$/, '');
  return cleanFraction ? `${cleanWhole}.${cleanFraction}` : cleanWhole;
}

/** US cents as USD: the decimal point two places to the left (after the noise of a double is rounded off). */
export function centsToUsd(cents: string): string {
  const plain = withoutDoubleNoise(plainDecimal(cents));
  const [whole, fraction = ''] = plain.split('.');
  const padded = whole!.padStart(3, '0');
  return plainDecimal(`${padded.slice(0, -2)}.${padded.slice(-2)}${fraction}`);
}

const significantDigits = (plain: string) => plain.replace('.', '').replace(/^0+/, '').length;

/**
 * A double holds 15 significant decimal digits for sure: a price written with 16 or 17
 * (`0.00007499999999999999` cents) is a double's noise around a shorter price, which rounding
 * the text half-up at 15 digits gives back (`0.000075`). Done on the text, exactly.
 */
export function withoutDoubleNoise(plain: string, digits = 15): string {
  if (significantDigits(plain) <= digits) return plain;
  const [whole, fraction = ''] = plain.split('.');
  const all = whole! + fraction;
  const first = all.search(/[1-9]/);
  const keep = first + digits; // digits of `all` kept
  const rounded = (BigInt(all.slice(0, keep)) + (Number(all[keep]) >= 5 ? 1n : 0n)).toString().padStart(keep, '0');
  // `rounded` may have grown a digit (999.. + 1): the point stays `whole.length` digits from the left of `all`.
  const grown = rounded.length - keep;
  const point = whole!.length + grown;
  const text = `${rounded.slice(0, point) || '0'}.${rounded.slice(point)}${'0'.repeat(Math.max(0, point - rounded.length))}`;
  return plainDecimal(text);
}

// --- Reading the dataset --------------------------------------------------------------------

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** A unit's price as the dataset's number text (`pricing_config.pay_as_you_go.<unit>.price`), or undefined. */
export function unitPrice(entry: unknown, unit: string): string | undefined {
  const payAsYouGo = isObject(entry) && isObject(entry.pricing_config) ? entry.pricing_config.pay_as_you_go : undefined;
  const price = isObject(payAsYouGo) && isObject(payAsYouGo[unit]) ? payAsYouGo[unit].price : undefined;
  return isLosslessNumber(price) ? price.value : undefined;
}

export interface SourceInfo {
  name: string;
  url: string;
  commit: string;
  date: string;
  license: string;
  files: string[];
}

/** The source as the snapshot's README names it: the repository, its commit and date. */
export function sourceFromReadme(readme: string): SourceInfo {
  const commit = /commit ([0-9a-f]{40})/.exec(readme)?.[1];
  const date = /commit [0-9a-f]{40}\s*\((\d{4}-\d{2}-\d{2})\)/.exec(readme)?.[1];
  if (!commit || !date)
    throw new Error('the dataset README does not name its commit and date ("commit <40 hex> (YYYY-MM-DD)")');
  return {
    name: 'Portkey-AI/models',
    url: 'https://github.com/Portkey-AI/models',
    commit,
    date,
    license: 'MIT',
    files: PROVIDERS.map((p) => `pricing/${p}.json`),
  };
}

// --- Choosing models ------------------------------------------------------------------------

export type ModelKind = 'chat' | 'embedding' | 'moderation';

/** Models whose cost is not per text token (or that are not called as chat or embeddings): left out, with why. */
const EXCLUDED: readonly (readonly [RegExp, string])[] = [
  [/^(dall-e|gpt-image|chatgpt-image|imagen)|-image(-|$)/, 'image generation: priced per image or image token'],
  [/^(sora|veo)-/, 'video generation: priced per second'],
  [/^(whisper|tts)-|-tts(-|$)|transcribe/, 'speech: priced per audio token or minute'],
  [/realtime/, 'realtime audio model: audio tokens are priced apart'],
  [/audio/, 'audio model: audio tokens are priced apart'],
];

export function kindOf(model: string): ModelKind {
  if (/embedding|^ada-v2$/.test(model)) return 'embedding';
  if (/moderation/.test(model)) return 'moderation';
  return 'chat';
}

/** Google lists prompt-size tiers as `<id>-lte-128k` / `<id>-gt-128k`; callers send `<id>`. */
const TIER = /-(lte|gt)-(\d+)k$/;

/**
 * Where Google's long-context price starts, in prompt tokens (above it, the whole call costs the
 * higher price). The dataset names every Google tier `128k`, Gemini 1.5's step; Google's price
 * list puts it at 200k for Gemini 2.5 Pro and every later Pro model.
 */
export function googleLongContextAbove(id: string): number {
  return /^gemini-1\.5-/.test(id) ? 128_000 : 200_000;
}

/**
 * Long-context prices the dataset does not have, from the provider's own price list (USD per
 * token): Claude Sonnet 4 and 4.5 with the 1M-token context bill a call whose input (cached or
 * not) is above 200k tokens at $6 / $22.50 per million, cache writes $7.50, reads $0.60.
 * https://docs.claude.com/en/docs/about-claude/pricing#long-context-pricing
 */
const SONNET_4_LONG_CONTEXT = {
  above_prompt_tokens: 200_000,
  input_cost_per_token: '0.000006',
  output_cost_per_token: '0.0000225',
  cache_read_input_cost_per_token: '0.0000006',
  cache_write_input_cost_per_token: '0.0000075',
  from: "Anthropic's price list (docs.claude.com/en/docs/about-claude/pricing#long-context-pricing): not in the dataset",
};
export const LONG_CONTEXT_SUPPLEMENT: Readonly<Record<string, CatalogLongContext>> = Object.freeze({
  'anthropic/claude-sonnet-4-0': SONNET_4_LONG_CONTEXT,
  'anthropic/claude-sonnet-4-20250514': SONNET_4_LONG_CONTEXT,
  'anthropic/claude-4-sonnet-20250514': SONNET_4_LONG_CONTEXT,
  'anthropic/claude-sonnet-4-5': SONNET_4_LONG_CONTEXT,
  'anthropic/claude-sonnet-4-5-20250929': SONNET_4_LONG_CONTEXT,
});

interface TierPrices {
  input_cost_per_token: string;
  output_cost_per_token: string;
  cache_read_input_cost_per_token: string | null;
  cache_write_input_cost_per_token: string | null;
}

/** The prices of a call whose prompt is above `above_prompt_tokens`: every token of it. */
export interface CatalogLongContext extends TierPrices {
  above_prompt_tokens: number;
  /** Where the tier comes from: the dataset's entry, or the provider's price list. */
  from: string;
}

export interface CatalogModel extends TierPrices {
  model: string;
  provider: Provider;
  kind: ModelKind;
  /** The dataset key the prices come from, when it is not the model id (a prompt-size tier). */
  dataset_key?: string;
  long_context?: CatalogLongContext;
}

export interface Catalog {
  taken_at: string;
  source: SourceInfo;
  generated_by: string;
  notes: string[];
  models: CatalogModel[];
  excluded: { model: string; provider: Provider; reason: string }[];
  warnings: string[];
}

/**
 * A cache price: `null` (the input price applies) when the dataset has none, or 0 while input
 * is not free. The dataset writes 0 for providers that bill no separate cache-write price
 * (OpenAI's older models): such writes are billed as input, and a guardrail must not count
 * billed tokens as free.
 */
function cachePrice(cents: string | undefined, inputUsd: string): string | null {
  if (cents === undefined) return null;
  const usd = centsToUsd(cents);
  return usd === '0' && inputUsd !== '0' ? null : usd;
}

/** A dataset `pay_as_you_go` block's token prices in USD (undefined without input and output prices). */
function tierPrices(entry: unknown): TierPrices | undefined {
  const request = unitPrice(entry, 'request_token');
  const response = unitPrice(entry, 'response_token');
  if (request === undefined || response === undefined) return undefined;
  const input = centsToUsd(request);
  return {
    input_cost_per_token: input,
    output_cost_per_token: centsToUsd(response),
    cache_read_input_cost_per_token: cachePrice(unitPrice(entry, 'cache_read_input_token'), input),
    cache_write_input_cost_per_token: cachePrice(unitPrice(entry, 'cache_write_input_token'), input),
  };
}

const sameTier = (a: TierPrices, b: TierPrices) =>
  a.input_cost_per_token === b.input_cost_per_token &&
  a.output_cost_per_token === b.output_cost_per_token &&
  a.cache_read_input_cost_per_token === b.cache_read_input_cost_per_token &&
  a.cache_write_input_cost_per_token === b.cache_write_input_cost_per_token;

/**
 * A model's long-context tier, from wherever the dataset says it: Google's `<id>-gt-<n>k` key,
 * or an entry's `custom_pricing.context_tier_map` (OpenAI: `{"0": "lte-272k", "272000":
 * "gt-272k"}`, the tier's prices under the default region's standard execution mode); else from
 * runguard's supplement. None when the higher tier costs the same as the standard one.
 */
function longContextOf(
  provider: Provider,
  id: string,
  key: string,
  files: Record<Provider, Json>,
  standard: TierPrices,
  warnings: string[],
): CatalogLongContext | undefined {
  const entry = files[provider][key];
  let found: CatalogLongContext | undefined;
  const tier = TIER.exec(key);
  if (tier?.[1] === 'lte') {
    const gtKey = `${id}-gt-${tier[2]}k`;
    const prices = tierPrices(files[provider][gtKey]);
    if (prices) found = { above_prompt_tokens: googleLongContextAbove(id), ...prices, from: `${provider}/${gtKey}` };
  }
  const custom = isObject(entry) && isObject(entry.custom_pricing) ? entry.custom_pricing : undefined;
  if (custom && isObject(custom.context_tier_map)) {
    const steps = Object.entries(custom.context_tier_map)
      .map(([above, name]) => [Number(above), String(name)] as const)
      .filter(([above]) => above > 0)
      .sort((a, b) => a[0] - b[0]);
    if (steps.length > 1) warnings.push(`${provider}/${key}: ${steps.length} context tiers; only the first is kept`);
    const [above, name] = steps[0] ?? [];
    const path = ['regions', 'default', 'execution_modes', 'standard', 'context_tiers', name ?? '', 'pricing_config'];
    const tierEntry = path.reduce<unknown>((at, step) => (isObject(at) ? at[step] : undefined), custom);
    const prices = above === undefined ? undefined : tierPrices({ pricing_config: tierEntry });
    if (prices) found = { above_prompt_tokens: above!, ...prices, from: `${provider}/${key} context tier ${name}` };
  }
  found ??= LONG_CONTEXT_SUPPLEMENT[`${provider}/${id}`];
  return found && !sameTier(found, standard) ? found : undefined;
}

export function buildCatalog(files: Record<Provider, Json>, source: SourceInfo): Catalog {
  const models: CatalogModel[] = [];
  const excluded: Catalog['excluded'] = [];
  const warnings: string[] = [];
  for (const provider of PROVIDERS) {
    // id -> [dataset key, tier threshold in k (Infinity: untiered)]: the lowest `lte` tier wins, then the untiered entry.
    const chosen = new Map<string, { key: string; threshold: number }>();
    for (const [key, entry] of Object.entries(files[provider])) {
      if (key === 'default' || !isObject(entry)) continue;
      const tier = TIER.exec(key);
      if (tier?.[1] === 'gt') continue; // the price past a prompt size: the lowest tier is the one used
      const id = tier ? key.slice(0, tier.index) : key;
      const reason = EXCLUDED.find(([pattern]) => pattern.test(id))?.[1];
      if (reason) {
        if (!excluded.some((e) => e.provider === provider && e.model === id))
          excluded.push({ model: id, provider, reason });
        continue;
      }
      if (unitPrice(entry, 'request_token') === undefined || unitPrice(entry, 'response_token') === undefined) {
        excluded.push({ model: id, provider, reason: 'no per-token input and output price' });
        continue;
      }
      const threshold = tier ? Number(tier[2]) : Infinity;
      const before = chosen.get(id);
      if (!before || threshold < before.threshold) chosen.set(id, { key, threshold });
    }
    for (const [id, { key }] of chosen) {
      const entry = files[provider][key];
      const standard = tierPrices(entry)!;
      const input = standard.input_cost_per_token;
      const longContext = longContextOf(provider, id, key, files, standard, warnings);
      const model: CatalogModel = {
        model: id,
        provider,
        kind: kindOf(id),
        ...standard,
        ...(key === id ? {} : { dataset_key: key }),
        ...(longContext ? { long_context: longContext } : {}),
      };
      for (const unit of ['request_token', 'response_token', 'cache_read_input_token', 'cache_write_input_token']) {
        const cents = unitPrice(entry, unit);
        if (cents !== undefined && significantDigits(plainDecimal(cents)) > 15) {
          warnings.push(
            `${provider}/${key}: ${unit} ${cents} cents is a double's noise; read as ${withoutDoubleNoise(plainDecimal(cents))}`,
          );
        }
      }
      if (
        model.cache_read_input_cost_per_token !== null &&
        Number(model.cache_read_input_cost_per_token) > Number(input)
      ) {
        warnings.push(
          `${provider}/${key}: a cache read (${model.cache_read_input_cost_per_token}) costs more than plain input (${input}); kept as the dataset says`,
        );
      }
      models.push(model);
    }
  }
  models.sort((a, b) => a.provider.localeCompare(b.provider) || a.model.localeCompare(b.model));
  excluded.sort((a, b) => a.provider.localeCompare(b.provider) || a.model.localeCompare(b.model));
  return {
    taken_at: source.date,
    source,
    generated_by: 'npm run pricing:catalog (scripts/pricing-catalog.ts); do not edit by hand',
    notes: [
      'USD per token (the dataset gives US cents per token; converted on the decimal text, exactly).',
      'Standard (pay-as-you-go) prices for text tokens. Batch, priority and regional prices, audio and image tokens, and per-call tools (web search) are not modelled.',
      'cache_*_input_cost_per_token null: cache reads or writes cost the input price (the dataset has no price, or 0 for a provider that bills no separate write price).',
      'Anthropic cache writes are the 5-minute ones (1.25x input); a 1-hour write (2x) is priced as a 5-minute one.',
      "Models priced by prompt size have the standard tier's prices, and under long_context the prices of a call whose prompt (every input token, cached or not) is above long_context.above_prompt_tokens: the whole call costs those. long_context.from names where they come from; dataset_key names the standard tier's key.",
      "Google's tiers are named 128k in the dataset; Google bills Gemini 2.5 Pro and later above 200,000 prompt tokens (Gemini 1.5 above 128,000), which above_prompt_tokens follows.",
      "Claude Sonnet 4 and 4.5 long-context prices (above 200,000 input tokens, with the 1M-token context) are not in the dataset: taken from Anthropic's price list.",
      'A model must equal the id the caller sends: fine-tuned models (ft:...:org::id) need an entry of their own.',
    ],
    models,
    excluded,
    warnings,
  };
}

/** Reads a dataset file keeping every number's text (a double would lose digits). */
async function readDataset(dir: string): Promise<{ files: Record<Provider, Json>; source: SourceInfo }> {
  const read = (name: string) =>
    readFile(join(dir, name), 'utf8').catch((error: NodeJS.ErrnoException) => {
      throw new Error(
        `cannot read the pricing dataset at ${dir} (${name}: ${error.code ?? error.message}); give its folder with --dataset DIR or RUNGUARD_PRICING_DATASET`,
      );
    });
  const source = sourceFromReadme(await read('README.md'));
  const entries = await Promise.all(PROVIDERS.map(async (p) => [p, parse(await read(`${p}.json`)) as Json] as const));
  return { files: Object.fromEntries(entries) as Record<Provider, Json>, source };
}

/** The catalog's JSON text: prices as bare JSON numbers written from their exact decimal text. */
export function catalogJson(catalog: Catalog): string {
  const number = (price: string | null) => (price === null ? null : new LosslessNumber(price));
  const numbers = <T extends TierPrices>(tier: T) => ({
    ...tier,
    input_cost_per_token: number(tier.input_cost_per_token),
    output_cost_per_token: number(tier.output_cost_per_token),
    cache_read_input_cost_per_token: number(tier.cache_read_input_cost_per_token),
    cache_write_input_cost_per_token: number(tier.cache_write_input_cost_per_token),
  });
  const withNumbers = {
    ...catalog,
    models: catalog.models.map((m) => ({
      ...numbers(m),
      ...(m.long_context ? { long_context: numbers(m.long_context) } : {}),
    })),
  };
  return `${stringify(withNumbers, undefined, 2)}\n`;
}

export async function generateCatalog(dir: string): Promise<string> {
  const { files, source } = await readDataset(dir);
  return catalogJson(buildCatalog(files, source));
}

async function main(argv: string[]): Promise<number> {
  const dir = datasetDir(argv, process.env);
  const outAt = argv.indexOf('--out');
  const out = outAt >= 0 && argv[outAt + 1] ? resolve(argv[outAt + 1]!) : CATALOG_PATH;
  const text = await generateCatalog(dir);
  const catalog = parse(text) as Catalog;
  for (const warning of catalog.warnings) process.stderr.write(`warning: ${warning}\n`);
  if (argv.includes('--check')) {
    const committed = await readFile(out, 'utf8').catch(() => '');
    if (committed === text) {
      process.stdout.write(`${out} is up to date with ${dir} (${catalog.models.length} models).\n`);
      return 0;
    }
    process.stderr.write(`${out} differs from what ${dir} gives: run npm run pricing:catalog and commit it.\n`);
    return 1;
  }
  await writeFile(out, text);
  process.stdout.write(
    `Wrote ${catalog.models.length} models (${catalog.excluded.length} left out) to ${out} from ${catalog.source.name}@${catalog.source.commit.slice(0, 12)} (${catalog.taken_at}).\n`,
  );
  return 0;
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      process.stderr.write(`pricing-catalog: ${(error as Error).message}\n`);
      process.exitCode = 1;
    },
  );
}
