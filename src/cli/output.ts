/** What commands print: aligned tables for people, JSON for scripts. */
import { colourWanted, createStyle, visible, type Style } from './style.js';

export interface Output {
  /** `--json` was given. */
  readonly json: boolean;
  /** A line to stdout. */
  line(text?: string): void;
  /** A value as JSON on stdout (pretty-printed: one document per command). */
  data(value: unknown): void;
  /** A JSON value on one line (streams of events, e.g. `runs tail --json`). */
  event(value: unknown): void;
  /** A warning to stderr; never mixed into the data on stdout. */
  warn(text: string): void;
  table(headers: string[], rows: (string | number | null | undefined)[][]): void;
  /** Colour for stdout (off with --json, in pipes and under NO_COLOR). */
  readonly style: Style;
}

export function createOutput(
  json: boolean,
  stdout: NodeJS.WritableStream = process.stdout,
  stderr: NodeJS.WritableStream = process.stderr,
): Output {
  return {
    json,
    style: createStyle(!json && colourWanted(stdout)),
    line: (text = '') => void stdout.write(`${text}\n`),
    data: (value) => void stdout.write(`${JSON.stringify(value, null, 2)}\n`),
    event: (value) => void stdout.write(`${JSON.stringify(value)}\n`),
    warn: (text) => void stderr.write(`runguard: warning: ${text}\n`),
    table: (headers, rows) => void stdout.write(renderTable(headers, rows)),
  };
}

export function renderTable(headers: string[], rows: (string | number | null | undefined)[][]): string {
  const cells = rows.map((row) =>
    row.map((cell) => (cell === null || cell === undefined || cell === '' ? '-' : String(cell))),
  );
  // Columns are measured as shown: colour codes take no room on the screen.
  const widths = headers.map((header, i) =>
    Math.max(header.length, ...cells.map((row) => visible(row[i] ?? '').length)),
  );
  const pad = (text: string, width: number) => text + ' '.repeat(Math.max(0, width - visible(text).length));
  const format = (row: string[]) =>
    row.map((cell, i) => (i === row.length - 1 ? cell : pad(cell, widths[i]!))).join('  ');
  // Blank headers: a list of name and value pairs, printed without a header line.
  const lines = headers.every((header) => header === '') ? cells.map(format) : [format(headers), ...cells.map(format)];
  return lines.map((line) => `${line.trimEnd()}\n`).join('');
}

/**
 * The one way the CLI writes money: USD with at least two decimals, and under a dollar enough
 * digits for per-call costs: `$0.00`, `$0.50`, `$12.50`, `$0.006`, `$0.000123`.
 */
export function usd(value: number | null | undefined): string {
  if (value === null || value === undefined) return '-';
  const abs = Math.abs(value);
  const digits = abs >= 1 || abs === 0 ? 2 : Math.min(10, Math.max(2, -Math.floor(Math.log10(abs)) + 3));
  return `${value < 0 ? '-' : ''}$${abs.toFixed(digits).replace(/(\.\d\d\d*?)0+$/, '$1')}`;
}

/** The one footer of a paged list: `Page 1 of 3 (120 runs).` */
export function pageFooter(page: { page: number; per_page: number; total: number }, noun: string): string {
  const pages = Math.max(1, Math.ceil(page.total / page.per_page));
  return `Page ${page.page} of ${pages} (${page.total} ${noun}${page.total === 1 ? '' : 's'}).`;
}

/** A number in plain decimal notation, digit for digit as JavaScript prints it: `8e-7` is `0.0000008`. */
export function plainDecimal(n: number): string {
  const match = /^(-?)(\d)(?:\.(\d+))?e-(\d+)$/.exec(String(n));
  if (!match) return String(n);
  const [, sign, digit, fraction = '', exponent] = match;
  return `${sign}0.${'0'.repeat(Number(exponent) - 1)}${digit}${fraction}`;
}

/** Per-token price in USD per million tokens, the unit providers publish. */
export function perMillion(perToken: number): string {
  return `$${Number((perToken * 1e6).toPrecision(12))}`;
}

export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '-';
  if (ms < 1_000) return `${ms}ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)}s`;
  const minutes = Math.floor(ms / 60_000);
  if (minutes < 60) return `${minutes}m${Math.floor((ms % 60_000) / 1_000)}s`;
  return `${Math.floor(minutes / 60)}h${minutes % 60}m`;
}

/** `2025-01-31 12:34:56Z`: an ISO timestamp, readable in a table. */
export function timestamp(iso: string | null | undefined): string {
  if (!iso) return '-';
  return iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}
