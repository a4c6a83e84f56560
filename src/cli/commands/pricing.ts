/**
 * `runguard pricing set|list|import`: per-workspace model prices, in USD per token as the API
 * stores them. `import` with no file loads the catalog shipped in `config/pricing-catalog.json`.
 */
import { readFile } from 'node:fs/promises';
import { Command, Option } from 'commander';
import type { ModelPricing } from '../api-client.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { CliError, describeError } from '../errors.js';
import { perMillion, plainDecimal, type Output } from '../output.js';

export const CATALOG_URL = new URL('../../../config/pricing-catalog.json', import.meta.url);

/** No model costs a cent per token; a price above that is almost surely a per-million figure. */
export const SUSPICIOUS_PER_TOKEN_USD = 0.01;

export interface PriceEntry {
  model: string;
  input_cost_per_token: number;
  output_cost_per_token: number;
  is_active?: boolean;
}

/**
 * A decimal text as a number, parsed once from its text (never computed in binary floating
 * point), optionally scaled from per-million: `"0.15"` per million is `0.15e-6`.
 */
export function parsePrice(text: string, label: string, perMillionUnit = false): number {
  if (!/^\d+(\.\d+)?([eE][-+]?\d+)?$/.test(text.trim())) {
    throw new CliError(`${label} must be a non-negative decimal number of USD (got ${JSON.stringify(text)}).`);
  }
  const value = Number(perMillionUnit ? `${text.trim()}e-6` : text.trim());
  if (!Number.isFinite(value)) throw new CliError(`${label} is out of range (got ${JSON.stringify(text)}).`);
  return value;
}

function warnIfPerMillion(out: Output, entry: PriceEntry) {
  for (const [side, price] of [['input', entry.input_cost_per_token], ['output', entry.output_cost_per_token]] as const) {
    if (price > SUSPICIOUS_PER_TOKEN_USD) {
      out.warn(
        `${entry.model}: ${side} price ${price} USD per token looks like a per-million price; ` +
          `per token it would be ${plainDecimal(Number(`${price}e-6`))} (use --per-million to give prices per million tokens).`,
      );
    }
  }
}

function printPrices(out: Output, entries: ModelPricing[]) {
  out.table(
    ['MODEL', 'INPUT/TOKEN', 'OUTPUT/TOKEN', 'INPUT/1M', 'OUTPUT/1M', 'ACTIVE'],
    entries.map((p) => [p.model, plainDecimal(p.input_cost_per_token), plainDecimal(p.output_cost_per_token), perMillion(p.input_cost_per_token),
      perMillion(p.output_cost_per_token), p.is_active ? 'yes' : 'no']),
  );
}

/** A catalog (`{taken_at, source, models: [...]}`) or a bare array of entries, checked. */
export function parseCatalog(text: string, name: string): { entries: PriceEntry[]; takenAt: string | null } {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (error) {
    throw new CliError(`${name} is not valid JSON: ${(error as Error).message}`);
  }
  const list = Array.isArray(doc) ? doc : (doc as { models?: unknown })?.models;
  if (!Array.isArray(list)) throw new CliError(`${name} must be an array of prices or an object with a "models" array.`);
  const entries = list.map((raw, i): PriceEntry => {
    const e = raw as Record<string, unknown>;
    const where = `${name}: models[${i}]`;
    if (typeof e?.model !== 'string' || e.model.length === 0) throw new CliError(`${where}: "model" must be a non-empty string.`);
    for (const key of ['input_cost_per_token', 'output_cost_per_token'] as const) {
      if (typeof e[key] !== 'number' || !Number.isFinite(e[key]) || (e[key]) < 0) {
        throw new CliError(`${where} (${e.model}): "${key}" must be a non-negative number of USD per token.`);
      }
    }
    if (e.is_active !== undefined && typeof e.is_active !== 'boolean') {
      throw new CliError(`${where} (${e.model}): "is_active" must be true or false.`);
    }
    return {
      model: e.model,
      input_cost_per_token: e.input_cost_per_token as number,
      output_cost_per_token: e.output_cost_per_token as number,
      ...(e.is_active === undefined ? {} : { is_active: e.is_active }),
    };
  });
  const takenAt = Array.isArray(doc) ? null : ((doc as { taken_at?: unknown }).taken_at as string | undefined) ?? null;
  return { entries, takenAt: typeof takenAt === 'string' ? takenAt : null };
}

function setCommand() {
  return apiCommand('set', "create or update a model's price")
    .argument('<model>', 'model id, exactly as steps and provider requests name it')
    .requiredOption('--input <usd>', 'USD per input token (e.g. 0.00000015), or per million with --per-million')
    .requiredOption('--output <usd>', 'USD per output token, or per million with --per-million')
    .addOption(new Option('--per-million', 'the prices are USD per million tokens, as providers publish them'))
    .addOption(new Option('--inactive', 'store the entry as inactive (steps of this model are not priced)'))
    .action(
      withApi(async ({ client, out }, options: ApiOptions & { input: string; output: string; perMillion?: boolean; inactive?: boolean }, model: string) => {
        const entry: PriceEntry = {
          model,
          input_cost_per_token: parsePrice(options.input, '--input', options.perMillion),
          output_cost_per_token: parsePrice(options.output, '--output', options.perMillion),
          is_active: options.inactive !== true,
        };
        warnIfPerMillion(out, entry);
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
        out.line('No model prices yet: steps are recorded without cost. Load the catalog with `runguard pricing import`.');
        return;
      }
      printPrices(out, prices);
    }),
  );
}

function importCommand() {
  return apiCommand('import', 'create or update prices from a JSON file; without a file, from the shipped catalog')
    .argument('[file]', 'a catalog ({"models": [...]}) or an array of {model, input_cost_per_token, output_cost_per_token}')
    .addOption(new Option('--catalog', 'import the catalog shipped with runguard (config/pricing-catalog.json)'))
    .action(
      withApi(async ({ client, out }, options: ApiOptions & { catalog?: boolean }, file?: string) => {
        if (file && options.catalog) throw new CliError('give a file or --catalog, not both.');
        const source = file ?? CATALOG_URL;
        const name = file ?? 'the shipped catalog';
        let text: string;
        try {
          text = await readFile(source, 'utf8');
        } catch (error) {
          throw new CliError(`cannot read ${name}: ${(error as Error).message}`);
        }
        const { entries, takenAt } = parseCatalog(text, name);
        for (const entry of entries) warnIfPerMillion(out, entry);
        const saved: ModelPricing[] = [];
        // One at a time: a failure names its model and leaves the earlier ones saved.
        for (const entry of entries) {
          try {
            saved.push(await client.putPricing(entry.model, entry));
          } catch (error) {
            if (!(error instanceof CliError)) throw error;
            if (saved.length > 0) out.warn(`imported ${saved.length} of ${entries.length} prices before ${entry.model} failed.`);
            throw new CliError(`${entry.model}: ${describeError(error).message}`, error.exitCode);
          }
        }
        if (out.json) return out.data(saved);
        printPrices(out, saved);
        out.line(`\nImported ${saved.length} price${saved.length === 1 ? '' : 's'} from ${name}${takenAt ? ` (prices as of ${takenAt})` : ''}.`);
      }),
    );
}

export function pricingCommand(): Command {
  return new Command('pricing')
    .description('model prices used to compute step costs')
    .addCommand(setCommand())
    .addCommand(listCommand())
    .addCommand(importCommand());
}
