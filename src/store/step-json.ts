/**
 * A run detail's steps as the answer's JSON bytes, written from the binary COPY of their columns.
 * Postgres writing the JSON itself (to_json, to_char, concat and string_agg, per row and column)
 * cost it ~7 ms of CPU for 1,000 steps, a third of it page faults; sending the columns as they are
 * stored costs it ~1.8 ms, and writing them here ~1.9 ms of the daemon's thread. Each value is
 * written as Postgres wrote it before: strings escaped as `to_json` escapes them, costs exact
 * (as `trim_scale(numeric)` writes them), caller JSON as it was stored, dates as
 * `Date.prototype.toISOString` writes them.
 */
import type { CopyRows } from './binary-copy.js';

/**
 * The columns a step is written from, in the order of its row, each cast to the type whose binary
 * form `writeStep` reads (a no-op while the table holds those types; the statement's, should the
 * table change). Caller data is in the json columns, or in the jsonb ones for steps written
 * before migration 5.
 */
const COLUMNS = [
  ['id', 's.id::uuid'],
  ['type', 's.type::text'],
  ['status', 's.status::text'],
  ['sequence', 's.sequence::int4'],
  ['model', 's.model::text'],
  ['toolName', 's.tool_name::text'],
  ['promptTokens', 's.prompt_tokens::int8'],
  ['completionTokens', 's.completion_tokens::int8'],
  ['cachedPromptTokens', 's.cached_prompt_tokens::int8'],
  ['cacheWriteTokens', 's.cache_write_tokens::int8'],
  ['reasoningTokens', 's.reasoning_tokens::int8'],
  ['cost', 's.cost_usd::numeric'],
  ['duration', 's.duration_ms::int8'],
  ['inputJson', 's.input_json::json'],
  ['inputJsonb', 's.input_data::jsonb'],
  ['outputJson', 's.output_json::json'],
  ['outputJsonb', 's.output_data::jsonb'],
  ['decision', 's.decision::json'],
  ['createdAt', 's.created_at::timestamptz'],
] as const;
export const STEP_COLUMNS: readonly string[] = COLUMNS.map(([, sql]) => sql);
/** Where each column's offset is in a row's part of `CopyRows.at` (its length follows it). */
const F = Object.fromEntries(COLUMNS.map(([name], i) => [name, 2 * i])) as Record<(typeof COLUMNS)[number][0], number>;

/** The sequence of the step in row `r`, whose STEP_COLUMNS start at field `first`. */
export const stepSequence = (rows: CopyRows, r: number, first: number): number =>
  rows.data[r]!.readInt32BE(rows.at[2 * (r * rows.fields + first) + F.sequence]);

const ascii = (text: string) => Buffer.from(text, 'latin1');
const KEYS = {
  id: ascii('{"id":"'),
  type: ascii('","type":'),
  status: ascii(',"status":'),
  sequence: ascii(',"sequence":'),
  model: ascii(',"model":'),
  toolName: ascii(',"tool_name":'),
  promptTokens: ascii(',"prompt_tokens":'),
  completionTokens: ascii(',"completion_tokens":'),
  cachedPromptTokens: ascii(',"cached_prompt_tokens":'),
  cacheReadTokens: ascii(',"cache_read_tokens":'),
  cacheWriteTokens: ascii(',"cache_write_tokens":'),
  reasoningTokens: ascii(',"reasoning_tokens":'),
  cost: ascii(',"cost_usd":'),
  duration: ascii(',"duration_ms":'),
  input: ascii(',"input_data":'),
  output: ascii(',"output_data":'),
  decision: ascii(',"decision":'),
  createdAt: ascii(',"created_at":'),
  close: ascii('}'),
};
const NULL = ascii('null');
/**
 * Bytes a step's keys take, and the most its values do past their own bytes: the uuid, the
 * integers, the date, and 4 for each text (its quotes, or null) and each JSON value (null).
 */
const FIXED_BYTES =
  Object.values(KEYS).reduce((sum, key) => sum + key.length, 0) + 36 + 11 + 8 * 20 + 32 + 4 * 4 + 3 * 4;
/** The span of a JavaScript date, in milliseconds from the Unix epoch either way. */
const MAX_DATE_MS = 8.64e15;
/** Two hex digits per byte value. */
const HEX = ascii(Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0')).join(''));
/** The escape of each byte below 0x20, and of `"` and `\`, as to_json and JSON.stringify write them. */
const ESCAPES = new Map<number, Buffer>([
  ...Array.from({ length: 0x20 }, (_, b) => [b, ascii(`\\u00${b.toString(16).padStart(2, '0')}`)] as const),
  [0x08, ascii('\\b')],
  [0x09, ascii('\\t')],
  [0x0a, ascii('\\n')],
  [0x0c, ascii('\\f')],
  [0x0d, ascii('\\r')],
  [0x22, ascii('\\"')],
  [0x5c, ascii('\\\\')],
]);
const NEEDS_ESCAPE = Uint8Array.from({ length: 256 }, (_, b) => (ESCAPES.has(b) ? 1 : 0));
/** Postgres's epoch (2000-01-01 UTC) in JavaScript's time. */
const POSTGRES_EPOCH_MS = 946_684_800_000;
const DAY_MS = 86_400_000;
const TWO_32 = 4_294_967_296;

/**
 * JSON bytes written into blocks; `blocks()` answers them, each cut to what was written. The
 * writers below write into `buffer` at `pos` themselves, once `room` was made.
 */
export class JsonBytes {
  private readonly done: Buffer[] = [];
  buffer: Buffer;
  pos = 0;
  /** The day (from the Unix epoch) of the last date written, and its text up to the time. */
  day = NaN;
  dayPrefix = Buffer.alloc(0);

  constructor(sizeHint: number) {
    this.buffer = Buffer.allocUnsafe(Math.max(sizeHint, 4096));
  }

  blocks(): Buffer[] {
    return [...this.done, this.buffer.subarray(0, this.pos)];
  }

  /** Makes room for `n` more bytes: a block past the current one when it lacks them. */
  room(n: number): void {
    if (this.buffer.length - this.pos >= n) return;
    this.done.push(this.buffer.subarray(0, this.pos));
    this.buffer = Buffer.allocUnsafe(Math.max(n, 64 * 1024));
    this.pos = 0;
  }

  bytes(source: Buffer, start = 0, end = source.length): void {
    this.room(end - start);
    this.pos = put(this.buffer, this.pos, source, start, end);
  }
}

/**
 * About how many bytes the JSON of `rows` takes: their fields' bytes and the keys (~240 a step),
 * and 16 KiB more, so that a page's steps mostly fit one block (writeStep makes room for a step
 * at its largest: its texts escaped at 6 bytes a byte).
 */
export function stepJsonSize(rows: CopyRows): number {
  let bytes = 240 * rows.length + 16 * 1024;
  for (let i = 1; i < 2 * rows.length * rows.fields; i += 2) bytes += Math.max(rows.at[i]!, 0);
  return bytes;
}

/*
 * The writers below each put one value at `pos` in `b` and answer the position after it; the
 * room was made for the whole step first (`writeStep`). Plain functions on a buffer and a
 * position: a method call and a field update per piece cost more than most pieces take to write.
 * A field is at `at[f]` (its offset) and `at[f + 1]` (its length, -1 for NULL): CopyRows.
 */

/** Bytes as they are. A native copy costs more than a loop moves in a short piece. */
function put(b: Buffer, pos: number, source: Buffer, start: number, end: number): number {
  if (end - start > 256) return pos + source.copy(b, pos, start, end);
  for (let i = start; i < end; i++) b[pos++] = source[i]!;
  return pos;
}

const putKey = (b: Buffer, pos: number, key: Buffer) => put(b, pos, key, 0, key.length);

/** A text field as a JSON string, or null. */
function putText(b: Buffer, pos: number, source: Buffer, at: Int32Array, f: number): number {
  if (at[f + 1]! < 0) return putKey(b, pos, NULL);
  const start = at[f]!;
  const end = start + at[f + 1]!;
  b[pos++] = 0x22;
  let from = start;
  for (let i = start; i < end; i++) {
    if (NEEDS_ESCAPE[source[i]!] === 0) continue;
    pos = put(b, pos, source, from, i);
    pos = putKey(b, pos, ESCAPES.get(source[i]!)!);
    from = i + 1;
  }
  pos = put(b, pos, source, from, end);
  b[pos++] = 0x22;
  return pos;
}

/** Caller JSON: the json field at `f`, else the jsonb one at `legacy` (steps before migration 5), else null. */
function putCallerJson(b: Buffer, pos: number, source: Buffer, at: Int32Array, f: number, legacy: number): number {
  // json's binary form is its text; jsonb's is a version byte (1), then its text.
  if (at[f + 1]! >= 0) return put(b, pos, source, at[f]!, at[f]! + at[f + 1]!);
  if (at[legacy + 1]! < 0) return putKey(b, pos, NULL);
  if (source[at[legacy]!] !== 1) throw new Error(`A jsonb value of binary version ${source[at[legacy]!]}.`);
  return put(b, pos, source, at[legacy]! + 1, at[legacy]! + at[legacy + 1]!);
}

/** A safe integer's decimal digits. */
function putInteger(b: Buffer, pos: number, n: number): number {
  if (n < 0) {
    b[pos++] = 0x2d;
    n = -n;
  }
  let digits = 1;
  for (let m = n; m >= 10; m = Math.floor(m / 10)) digits++;
  const end = pos + digits;
  let i = end;
  do {
    const quotient = Math.floor(n / 10);
    b[--i] = 0x30 + (n - quotient * 10); // not 0x30 + n first: past 2^53 - 48 that sum rounds
    n = quotient;
  } while (n > 0);
  return end;
}

/** A binary int8 field, or null. */
function putInt8(b: Buffer, pos: number, source: Buffer, at: Int32Array, f: number): number {
  if (at[f + 1]! < 0) return putKey(b, pos, NULL);
  const high = source.readInt32BE(at[f]);
  // Up to 2^53 in magnitude the two halves add up exactly; past it, a bigint writes the digits.
  if (high >= -0x200000 && high < 0x200000) return putInteger(b, pos, high * TWO_32 + source.readUInt32BE(at[f]! + 4));
  return putKey(b, pos, ascii(source.readBigInt64BE(at[f]).toString()));
}

/**
 * The most bytes a binary numeric field takes as text: the digits of its integer part and its
 * fraction (4 a base-10000 digit), a sign and a point. `putNumeric` writes it.
 */
function numericBytes(source: Buffer, at: Int32Array, f: number): number {
  if (at[f + 1]! < 0) return 4;
  const count = source.readInt16BE(at[f]);
  const weight = source.readInt16BE(at[f]! + 2);
  return 6 + 4 * (Math.max(weight, 0) + 1) + 4 * Math.max(count - 1 - weight, 0);
}

/**
 * A binary numeric field, as `trim_scale` then numeric's output write it: every digit, none after
 * the last non-zero one; null for NULL, NaN and the infinities (JSON has no number for them). The
 * binary form: digit count, weight (the first digit's power of 10000), sign, display scale, then
 * the base-10000 digits; those past the count are zero.
 */
function putNumeric(b: Buffer, pos: number, source: Buffer, at: Int32Array, f: number): number {
  if (at[f + 1]! < 0) return putKey(b, pos, NULL);
  const offset = at[f]!;
  const count = source.readInt16BE(offset);
  const weight = source.readInt16BE(offset + 2);
  const sign = source.readUInt16BE(offset + 4);
  if (sign !== 0 && sign !== 0x4000) return putKey(b, pos, NULL); // NaN 0xC000, Infinity 0xD000, -Infinity 0xF000
  const digit = (i: number) => (i >= 0 && i < count ? source.readUInt16BE(offset + 8 + 2 * i) : 0);
  if (sign === 0x4000 && count > 0) b[pos++] = 0x2d;
  let written = false;
  for (let i = 0; i <= weight; i++) {
    if (written) pos = putGroup(b, pos, digit(i));
    else if (digit(i) !== 0) {
      pos = putInteger(b, pos, digit(i));
      written = true;
    }
  }
  if (!written) b[pos++] = 0x30;
  const fractionGroups = count - 1 - weight;
  if (fractionGroups > 0) {
    const point = pos;
    b[pos++] = 0x2e;
    for (let p = 1; p <= fractionGroups; p++) pos = putGroup(b, pos, digit(weight + p)); // below 0: zeros before the first digit
    while (b[pos - 1] === 0x30) pos--;
    if (pos === point + 1) pos = point;
  }
  return pos;
}

/** One base-10000 digit as four decimal ones. */
function putGroup(b: Buffer, pos: number, d: number): number {
  b[pos + 3] = 0x30 + (d % 10);
  b[pos + 2] = 0x30 + (Math.floor(d / 10) % 10);
  b[pos + 1] = 0x30 + (Math.floor(d / 100) % 10);
  b[pos] = 0x30 + Math.floor(d / 1000);
  return pos + 4;
}

function putTwoDigits(b: Buffer, pos: number, n: number): number {
  b[pos] = 0x30 + Math.floor(n / 10);
  b[pos + 1] = 0x30 + (n % 10);
  return pos + 2;
}

/** A binary uuid in its text form. */
function putUuid(b: Buffer, pos: number, source: Buffer, at: number): number {
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) b[pos++] = 0x2d;
    const byte = source[at + i]!;
    b[pos++] = HEX[2 * byte]!;
    b[pos++] = HEX[2 * byte + 1]!;
  }
  return pos;
}

/**
 * A binary timestamptz field (microseconds from 2000-01-01 UTC) as a JSON string, cut to the
 * millisecond, as `Date.prototype.toISOString` writes it; null for NULL, an infinity, or a date
 * past what a JavaScript date holds (years up to 275760). The date part is kept (in `out`) from
 * the last one written: a run's steps mostly share their day.
 */
function putTimestamp(out: JsonBytes, b: Buffer, pos: number, source: Buffer, at: Int32Array, f: number): number {
  if (at[f + 1]! < 0) return putKey(b, pos, NULL);
  const high = source.readInt32BE(at[f]);
  let ms: number;
  if (high >= -0x200000 && high < 0x200000) {
    const us = high * TWO_32 + source.readUInt32BE(at[f]! + 4);
    ms = (us - (((us % 1000) + 1000) % 1000)) / 1000;
  } else {
    const us = source.readBigInt64BE(at[f]);
    if (us === 0x7fffffffffffffffn || us === -0x8000000000000000n) return putKey(b, pos, NULL);
    ms = Number((us - (((us % 1000n) + 1000n) % 1000n)) / 1000n);
  }
  ms += POSTGRES_EPOCH_MS;
  if (ms > MAX_DATE_MS || ms < -MAX_DATE_MS) return putKey(b, pos, NULL);
  const day = Math.floor(ms / DAY_MS);
  if (day !== out.day) {
    const iso = new Date(day * DAY_MS).toISOString();
    out.dayPrefix = ascii(iso.slice(0, iso.indexOf('T') + 1));
    out.day = day;
  }
  let rest = ms - day * DAY_MS;
  b[pos++] = 0x22;
  pos = putKey(b, pos, out.dayPrefix);
  pos = putTwoDigits(b, pos, Math.floor(rest / 3_600_000));
  b[pos++] = 0x3a;
  rest %= 3_600_000;
  pos = putTwoDigits(b, pos, Math.floor(rest / 60_000));
  b[pos++] = 0x3a;
  rest %= 60_000;
  pos = putTwoDigits(b, pos, Math.floor(rest / 1000));
  b[pos++] = 0x2e;
  rest %= 1000;
  b[pos++] = 0x30 + Math.floor(rest / 100);
  pos = putTwoDigits(b, pos, rest % 100);
  b[pos++] = 0x5a;
  b[pos++] = 0x22;
  return pos;
}

/** Writes the step of row `r`, whose STEP_COLUMNS start at field `first`. */
export function writeStep(out: JsonBytes, rows: CopyRows, r: number, first: number): void {
  const data = rows.data[r]!;
  const at = rows.at;
  const i = 2 * (r * rows.fields + first);
  const length = (f: number) => Math.max(at[i + f + 1]!, 0);
  // Room for the step at its largest: its texts escaped at 6 bytes a byte, its JSON as it is.
  out.room(
    FIXED_BYTES +
      numericBytes(data, at, i + F.cost) +
      6 * (length(F.type) + length(F.status) + length(F.model) + length(F.toolName)) +
      length(F.inputJson) +
      length(F.inputJsonb) +
      length(F.outputJson) +
      length(F.outputJsonb) +
      length(F.decision),
  );
  const b = out.buffer;
  let pos = out.pos;
  pos = putKey(b, pos, KEYS.id);
  pos = putUuid(b, pos, data, at[i + F.id]!);
  pos = putKey(b, pos, KEYS.type);
  pos = putText(b, pos, data, at, i + F.type);
  pos = putKey(b, pos, KEYS.status);
  pos = putText(b, pos, data, at, i + F.status);
  pos = putKey(b, pos, KEYS.sequence);
  pos = putInteger(b, pos, stepSequence(rows, r, first));
  pos = putKey(b, pos, KEYS.model);
  pos = putText(b, pos, data, at, i + F.model);
  pos = putKey(b, pos, KEYS.toolName);
  pos = putText(b, pos, data, at, i + F.toolName);
  pos = putKey(b, pos, KEYS.promptTokens);
  pos = putInt8(b, pos, data, at, i + F.promptTokens);
  pos = putKey(b, pos, KEYS.completionTokens);
  pos = putInt8(b, pos, data, at, i + F.completionTokens);
  // cached_prompt_tokens: the older name of cache_read_tokens (one column), kept for clients that read it.
  pos = putKey(b, pos, KEYS.cachedPromptTokens);
  pos = putInt8(b, pos, data, at, i + F.cachedPromptTokens);
  pos = putKey(b, pos, KEYS.cacheReadTokens);
  pos = putInt8(b, pos, data, at, i + F.cachedPromptTokens);
  pos = putKey(b, pos, KEYS.cacheWriteTokens);
  pos = putInt8(b, pos, data, at, i + F.cacheWriteTokens);
  pos = putKey(b, pos, KEYS.reasoningTokens);
  pos = putInt8(b, pos, data, at, i + F.reasoningTokens);
  pos = putKey(b, pos, KEYS.cost);
  pos = putNumeric(b, pos, data, at, i + F.cost);
  pos = putKey(b, pos, KEYS.duration);
  pos = putInt8(b, pos, data, at, i + F.duration);
  pos = putKey(b, pos, KEYS.input);
  pos = putCallerJson(b, pos, data, at, i + F.inputJson, i + F.inputJsonb);
  pos = putKey(b, pos, KEYS.output);
  pos = putCallerJson(b, pos, data, at, i + F.outputJson, i + F.outputJsonb);
  pos = putKey(b, pos, KEYS.decision);
  const decision = i + F.decision;
  pos =
    at[decision + 1]! < 0 ? putKey(b, pos, NULL) : put(b, pos, data, at[decision]!, at[decision]! + at[decision + 1]!);
  pos = putKey(b, pos, KEYS.createdAt);
  pos = putTimestamp(out, b, pos, data, at, i + F.createdAt);
  pos = putKey(b, pos, KEYS.close);
  // A Buffer drops writes past its end without a word: a room too small must fail, not cut the answer.
  if (pos > b.length) throw new Error(`A step's JSON ran ${pos - b.length} bytes past the room made for it.`);
  out.pos = pos;
}
