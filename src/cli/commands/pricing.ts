/**
 * `runguard pricing set|list|import`: per-workspace model prices, in USD per token as the API
 * stores them. `import` with no file loads the catalog shipped in `config/pricing-catalog.json`.
 */
import { readFile } from 'node:fs/promises';
import { Command, Option } from 'commander';
import { cliCommand } from '../../cli-command.js';
import type { ModelPricing, PriceInput, PricingImport } from '../api-client.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { toolPricingCommands } from './mcp.js';
import { CliError } from '../errors.js';
import { perMillion, plainDecimal, type Output } from '../output.js';
import { priceUnit, pricePerToken } from '../price-units.js';

export const CATALOG_URL = new URL('../../../config/pricing-catalog.json', import.meta.url);

export interface PriceEntry extends PriceInput {
  model: string;
}

const cachePrice = (price: number | null) => (price === null ? 'input' : perMillion(price));

/** A long-context tier in one cell: `>200000: 2.5 / 15` (input / output per million), or `-`. */
const longContextCell = (tier: PriceInput['long_context']) =>
  tier
    ? `>${tier.above_prompt_tokens}: ${perMillion(tier.input_cost_per_token)} / ${perMillion(tier.output_cost_per_token)}`
    : '-';

function printPrices(out: Output, entries: ModelPricing[]) {
  out.table(
    [
      'MODEL',
      'INPUT/TOKEN',
      'OUTPUT/TOKEN',
      'INPUT/1M',
      'OUTPUT/1M',
      'CACHE READ/1M',
      'CACHE WRITE/1M',
      'LONG CONTEXT (IN / OUT per 1M)',
      'ACTIVE',
      'SET BY',
    ],
    entries.map((price) => [
      price.model,
      plainDecimal(price.input_cost_per_token),
      plainDecimal(price.output_cost_per_token),
      perMillion(price.input_cost_per_token),
      perMillion(price.output_cost_per_token),
      cachePrice(price.cache_read_input_cost_per_token),
      cachePrice(price.cache_write_input_cost_per_token),
      longContextCell(price.long_context),
      price.is_active ? 'yes' : 'no',
      price.source === 'catalog' ? 'catalog' : 'hand',
    ]),
  );
}

/** A price field of a catalog entry: a non-negative number, or (`nullable`) null or absent. */
function priceField(
  entry: Record<string, unknown>,
  key: string,
  where: string,
  nullable: boolean,
): number | null | undefined {
  const value = entry[key];
  if (nullable && (value === null || value === undefined)) return value;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new CliError(
      `${where} (${String(entry.model)}): "${key}" must be a non-negative number of USD per token${nullable ? ' or null' : ''}.`,
    );
  }
  return value;
}

/** A catalog entry's `long_context`: null or absent (none), or a threshold with its prices. */
function longContextField(entry: Record<string, unknown>, where: string): PriceInput['long_context'] | undefined {
  const tier = entry.long_context;
  if (tier === null || tier === undefined) return tier;
  const fields = tier as Record<string, unknown>;
  const above = fields.above_prompt_tokens;
  if (typeof tier !== 'object' || typeof above !== 'number' || !Number.isSafeInteger(above) || above < 0) {
    throw new CliError(
      `${where} (${String(entry.model)}): "long_context" must be null or {above_prompt_tokens: a whole number of tokens, input_cost_per_token, output_cost_per_token, ...}.`,
    );
  }
  const at = `${where}.long_context`;
  const cacheRead = priceField({ ...fields, model: entry.model }, 'cache_read_input_cost_per_token', at, true);
  const cacheWrite = priceField({ ...fields, model: entry.model }, 'cache_write_input_cost_per_token', at, true);
  return {
    above_prompt_tokens: above,
    input_cost_per_token: priceField({ ...fields, model: entry.model }, 'input_cost_per_token', at, false)!,
    output_cost_per_token: priceField({ ...fields, model: entry.model }, 'output_cost_per_token', at, false)!,
    ...(cacheRead === undefined ? {} : { cache_read_input_cost_per_token: cacheRead }),
    ...(cacheWrite === undefined ? {} : { cache_write_input_cost_per_token: cacheWrite }),
  };
}

/** A catalog (`{taken_at, source, models: [...]}`) or a bare array of entries, checked. */
export function parseCatalog(
  text: string,
  name: string,
): { entries: PriceEntry[]; takenAt: string | null; source: string | null } {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (error) {
    throw new CliError(`${name} is not valid JSON: ${(error as Error).message}`);
  }
  const list = Array.isArray(doc) ? doc : (doc as { models?: unknown })?.models;
  if (!Array.isArray(list))
    throw new CliError(`${name} must be an array of prices or an object with a "models" array.`);
  const entries = list.map((raw, i): PriceEntry => {
    const entry = raw as Record<string, unknown>;
    const where = `${name}: models[${i}]`;
    if (typeof entry?.model !== 'string' || entry.model.length === 0)
      throw new CliError(`${where}: "model" must be a non-empty string.`);
    if (entry.is_active !== undefined && typeof entry.is_active !== 'boolean') {
      throw new CliError(`${where} (${entry.model}): "is_active" must be true or false.`);
    }
    const cacheRead = priceField(entry, 'cache_read_input_cost_per_token', where, true);
    const cacheWrite = priceField(entry, 'cache_write_input_cost_per_token', where, true);
    const longContext = longContextField(entry, where);
    return {
      model: entry.model,
      input_cost_per_token: priceField(entry, 'input_cost_per_token', where, false)!,
      output_cost_per_token: priceField(entry, 'output_cost_per_token', where, false)!,
      ...(cacheRead === undefined ? {} : { cache_read_input_cost_per_token: cacheRead }),
      ...(cacheWrite === undefined ? {} : { cache_write_input_cost_per_token: cacheWrite }),
      ...(longContext === undefined ? {} : { long_context: longContext }),
      ...(entry.is_active === undefined ? {} : { is_active: entry.is_active }),
    };
  });
  const meta = Array.isArray(doc)
    ? {}
    : (doc as { taken_at?: unknown; source?: { name?: unknown; commit?: unknown } | string });
  const takenAt = typeof meta.taken_at === 'string' ? meta.taken_at : null;
  const source =
    typeof meta.source === 'object' && meta.source && typeof meta.source.name === 'string'
      ? `${meta.source.name}${typeof meta.source.commit === 'string' ? `@${meta.source.commit.slice(0, 12)}` : ''}`
      : null;
  return { entries, takenAt, source };
}

type SetOptions = ApiOptions & {
  input: string;
  output: string;
  cacheRead?: string;
  cacheWrite?: string;
  longContextAbove?: string;
  longInput?: string;
  longOutput?: string;
  longCacheRead?: string;
  longCacheWrite?: string;
  perMillion?: boolean;
  perToken?: boolean;
  inactive?: boolean;
};

/** `--long-context-above` with its `--long-*` prices, or null when none is given. */
function longContextOption(
  options: SetOptions,
  price: (text: string | undefined, flag: string) => number | undefined,
): PriceInput['long_context'] {
  const { longContextAbove: above, longInput, longOutput, longCacheRead, longCacheWrite } = options;
  if (above === undefined) {
    if ([longInput, longOutput, longCacheRead, longCacheWrite].some((value) => value !== undefined))
      throw new CliError('the --long-* prices need --long-context-above <tokens>: the prompt size they start above.');
    return null;
  }
  if (!/^\d+$/.test(above.trim()) || !Number.isSafeInteger(Number(above)))
    throw new CliError(`--long-context-above must be a whole number of tokens (got ${JSON.stringify(above)}).`);
  if (longInput === undefined || longOutput === undefined)
    throw new CliError('--long-context-above needs --long-input and --long-output: the prices above it.');
  return {
    above_prompt_tokens: Number(above),
    input_cost_per_token: price(longInput, '--long-input')!,
    output_cost_per_token: price(longOutput, '--long-output')!,
    cache_read_input_cost_per_token: price(longCacheRead, '--long-cache-read') ?? null,
    cache_write_input_cost_per_token: price(longCacheWrite, '--long-cache-write') ?? null,
  };
}

function setCommand() {
  return apiCommand('set', "create or update a model's price (the entry is then yours: imports keep it)")
    .argument('<model>', 'model id, exactly as steps and provider requests name it')
    .argument('[extra...]')
    .requiredOption(
      '--input <usd>',
      'input price: USD per million tokens with --per-million, per token with --per-token',
    )
    .requiredOption('--output <usd>', 'output price, in the same unit')
    .option('--cache-read <usd>', 'price of a prompt-cache read, in the same unit (default: the input price)')
    .option('--cache-write <usd>', 'price of a prompt-cache write, in the same unit (default: the input price)')
    .option(
      '--long-context-above <tokens>',
      'a long-context tier: a call whose prompt has more tokens than this costs the --long-* prices, every token of it',
    )
    .option('--long-input <usd>', 'input price of such a call, in the same unit (with --long-context-above)')
    .option('--long-output <usd>', 'output price of such a call, in the same unit (with --long-context-above)')
    .option('--long-cache-read <usd>', 'cache-read price of such a call (default: its input price)')
    .option('--long-cache-write <usd>', 'cache-write price of such a call (default: its input price)')
    .addOption(new Option('--per-million', 'the prices are USD per million tokens, as providers publish them'))
    .addOption(new Option('--per-token', 'the prices are USD per token, as the API stores them'))
    .addOption(new Option('--inactive', 'store the entry as inactive (steps of this model are not priced)'))
    .addHelpText(
      'after',
      `\nExamples:\n  ${cliCommand('pricing set')} gpt-4o-mini --per-million --input 0.15 --output 0.6 --cache-read 0.075\n` +
        `  ${cliCommand('pricing set')} gemini-2.5-pro --per-million --input 1.25 --output 10 --cache-read 0.125 \\\n` +
        '      --long-context-above 200000 --long-input 2.5 --long-output 15 --long-cache-read 0.25\n' +
        '\nWithout a unit, only a figure that can only be a price per token (at most 0.001) is taken.',
    )
    .action(
      withApi(async ({ client, out }, options: SetOptions, model: string, extra: string[] = []) => {
        if (extra.length > 0) {
          throw new CliError(
            `unexpected ${JSON.stringify(extra.join(' '))}: --per-million is a unit, not a price; write ` +
              `${cliCommand('pricing set')} ${model} --per-million --input 0.15 --output 0.6`,
          );
        }
        const unit = priceUnit(options);
        const price = (text: string | undefined, flag: string) =>
          text === undefined ? undefined : pricePerToken(text, flag, unit);
        const entry: PriceInput = {
          input_cost_per_token: price(options.input, '--input')!,
          output_cost_per_token: price(options.output, '--output')!,
          ...(options.cacheRead === undefined
            ? {}
            : { cache_read_input_cost_per_token: price(options.cacheRead, '--cache-read') }),
          ...(options.cacheWrite === undefined
            ? {}
            : { cache_write_input_cost_per_token: price(options.cacheWrite, '--cache-write') }),
          long_context: longContextOption(options, price),
          is_active: options.inactive !== true,
        };
        const saved = await client.putPricing(model, entry);
        if (out.json) return out.data(saved);
        printPrices(out, [saved]);
      }),
    );
}

function listCommand() {
  return apiCommand('list', 'list the active model prices').action(
    withApi(async ({ client, out }) => {
      const prices = await client.listPricing();
      if (out.json) return out.data(prices);
      if (prices.length === 0) {
        out.line(
          `No model prices yet: steps are recorded without cost. Load the catalog with \`${cliCommand('pricing import')}\`.`,
        );
        return;
      }
      printPrices(out, prices);
    }),
  );
}

const CHANGE_LABEL = { new: 'new', changed: 'changed', unchanged: 'unchanged', kept: 'kept (set by hand)' } as const;

/**
 * One line per model the import touches (unchanged ones on request: a catalog has hundreds), at
 * the catalog's price; WAS is the price before, which a kept entry keeps.
 */
function printImport(out: Output, result: PricingImport, catalog: ReadonlyMap<string, PriceEntry>, all: boolean) {
  const shown = result.items.filter((i) => all || i.change !== 'unchanged');
  if (shown.length === 0) return;
  out.table(
    [
      'MODEL',
      'CHANGE',
      'INPUT/1M',
      'OUTPUT/1M',
      'CACHE READ/1M',
      'CACHE WRITE/1M',
      'LONG CONTEXT (IN / OUT per 1M)',
      'WAS (INPUT / OUTPUT per 1M)',
    ],
    shown.map(({ model, change, before }) => {
      const price = catalog.get(model)!;
      const was =
        before && (change === 'changed' || change === 'kept')
          ? `${perMillion(before.input_cost_per_token)} / ${perMillion(before.output_cost_per_token)}`
          : '';
      return [
        model,
        CHANGE_LABEL[change],
        perMillion(price.input_cost_per_token),
        perMillion(price.output_cost_per_token),
        cachePrice(price.cache_read_input_cost_per_token ?? null),
        cachePrice(price.cache_write_input_cost_per_token ?? null),
        longContextCell(price.long_context),
        was,
      ];
    }),
  );
  out.line('');
}

function importCommand() {
  return apiCommand(
    'import',
    'import prices from a JSON file, or from the shipped catalog: shows what is new, changed and unchanged',
  )
    .argument(
      '[file]',
      'a catalog ({"models": [...]}) or an array of {model, input_cost_per_token, output_cost_per_token, ...}',
    )
    .addOption(new Option('--catalog', 'import the catalog shipped with runguard (config/pricing-catalog.json)'))
    .addOption(new Option('--overwrite', 'replace prices set by hand too (by default they are kept)'))
    .addOption(new Option('--dry-run', 'show what would change, change nothing'))
    .addOption(new Option('--all', 'list unchanged models too'))
    .action(
      withApi(
        async (
          { client, out },
          options: ApiOptions & { catalog?: boolean; overwrite?: boolean; dryRun?: boolean; all?: boolean },
          file?: string,
        ) => {
          if (file && options.catalog) throw new CliError('give a file or --catalog, not both.');
          const path = file ?? CATALOG_URL;
          const name = file ?? 'the shipped catalog';
          let text: string;
          try {
            text = await readFile(path, 'utf8');
          } catch (error) {
            throw new CliError(`cannot read ${name}: ${(error as Error).message}`);
          }
          const { entries, takenAt, source } = parseCatalog(text, name);
          const result = await client.importPricing(entries, {
            overwrite: options.overwrite === true,
            dryRun: options.dryRun === true,
          });
          if (out.json) return out.data(result);
          printImport(out, result, new Map(entries.map((entry) => [entry.model, entry])), options.all === true);
          const from = `${name}${source ? ` (${source}${takenAt ? `, prices as of ${takenAt}` : ''})` : takenAt ? ` (prices as of ${takenAt})` : ''}`;
          const verb = result.dry_run ? 'Would import' : 'Imported';
          out.line(
            `${verb} ${entries.length} price${entries.length === 1 ? '' : 's'} from ${from}: ${result.new} new, ${result.changed} changed, ` +
              `${result.unchanged} unchanged, ${result.kept} kept.`,
          );
          if (result.kept > 0) {
            out.line(
              result.kept === 1
                ? `1 price was set by hand and differs from ${name}; kept. Replace it with --overwrite.`
                : `${result.kept} prices were set by hand and differ from ${name}; kept. Replace them with --overwrite.`,
            );
          }
        },
      ),
    );
}

function deleteCommand() {
  return apiCommand('delete', "delete a model's price (its calls are then recorded without cost)")
    .argument('<model>', `the model, as \`${cliCommand('pricing list')}\` shows it`)
    .addOption(new Option('--yes', 'confirm: its calls are then recorded without cost'))
    .action(
      withApi(async ({ client, out }, options: ApiOptions & { yes?: boolean }, model: string) => {
        // As every delete of the CLI: said, not done, without --yes.
        if (!options.yes)
          throw new CliError(`deleting the price of ${model} leaves its calls without cost; run again with --yes`);
        await client.request('DELETE', `/v1/model-pricing/${encodeURIComponent(model)}`);
        if (out.json) return out.data({ model, deleted: true });
        out.line(`Deleted the price of ${model}.`);
      }),
    );
}

export function pricingCommand(): Command {
  const pricing = new Command('pricing')
    .description('model prices and tool prices used to compute step costs')
    .addCommand(setCommand())
    .addCommand(listCommand())
    .addCommand(importCommand())
    .addCommand(deleteCommand());
  for (const command of toolPricingCommands()) pricing.addCommand(command);
  return pricing;
}
