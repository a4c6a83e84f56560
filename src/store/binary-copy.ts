/**
 * Reads the rows of `COPY ... TO STDOUT (FORMAT binary)` from the chunks Postgres sent. A row's
 * fields are found in place: each row is a buffer and each field an offset and a length in it, so
 * reading a thousand rows makes no object per row or field. A row cut across chunks (the chunks
 * come as the socket read them) is joined into one buffer first.
 * The format: https://www.postgresql.org/docs/current/sql-copy.html#id-1.9.3.55.9.4
 */

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');

/**
 * The rows of a COPY: row r's field f is `data[r][o .. o + n]` with o = `at[2(r * fields + f)]`
 * and n = `at[2(r * fields + f) + 1]`; a length of -1 is SQL NULL. The offsets of all rows are
 * one typed array: a thousand rows of arrays of their own would be young garbage that a
 * scavenge during the read promotes, and full collections follow.
 */
export interface CopyRows {
  length: number;
  fields: number;
  data: Buffer[];
  at: Int32Array;
}

export const isNull = (rows: CopyRows, r: number, f: number): boolean => rows.at[2 * (r * rows.fields + f) + 1]! < 0;

/** Row r's field f as a view of its bytes (not a copy); null for SQL NULL. */
export function field(rows: CopyRows, r: number, f: number): Buffer | null {
  const i = 2 * (r * rows.fields + f);
  return rows.at[i + 1]! < 0 ? null : rows.data[r]!.subarray(rows.at[i], rows.at[i]! + rows.at[i + 1]!);
}

/** A text field's value as a string. */
export const fieldText = (rows: CopyRows, r: number, f: number): string | null =>
  field(rows, r, f)?.toString('utf8') ?? null;

/** Big-endian reads without the bounds checks of Buffer's own (the caller checks). */
const int16 = (b: Buffer, p: number) => (((b[p]! << 8) | b[p + 1]!) << 16) >> 16;
const int32 = (b: Buffer, p: number) => (b[p]! << 24) | (b[p + 1]! << 16) | (b[p + 2]! << 8) | b[p + 3]!;

/** Makes room in `rows.at` for `capacity` rows (no fewer than it holds). */
function grow(rows: CopyRows, capacity: number): void {
  if (rows.at.length >= 2 * rows.fields * capacity) return;
  const grown = new Int32Array(2 * rows.fields * capacity);
  grown.set(rows.at.subarray(0, 2 * rows.fields * rows.length));
  rows.at = grown;
}

/** Every row of the stream, in the order Postgres sent them. */
export function binaryCopyRows(chunks: readonly Buffer[]): CopyRows {
  let buffer = chunks[0] ?? Buffer.alloc(0);
  let next = 1;
  let pos = 0;
  /** The chunk a joined buffer's last bytes came from, and how much of it the buffer holds. */
  let cut: { chunk: Buffer; taken: number } | null = null;
  const ended = () => new Error('The binary COPY stream ended early.');
  /**
   * Makes the buffer from `pos` (a row's start) longer. With nothing of it held, the next bytes
   * are read in place; else the rest and as much again (1 KiB at least), from the chunks that
   * follow, are joined into one buffer: a row spanning many chunks is copied a few times its size.
   */
  const more = () => {
    if (pos === buffer.length) {
      if (cut && cut.taken < cut.chunk.length) [buffer, pos] = [cut.chunk, cut.taken];
      else if (next < chunks.length) [buffer, pos] = [chunks[next++]!, 0];
      else throw ended();
      cut = null;
      return;
    }
    const pieces = [buffer.subarray(pos)];
    for (let want = Math.max(buffer.length - pos, 1024); want > 0;) {
      if (!cut || cut.taken === cut.chunk.length) {
        if (next === chunks.length) break;
        cut = { chunk: chunks[next++]!, taken: 0 };
      }
      const add = Math.min(want, cut.chunk.length - cut.taken);
      pieces.push(cut.chunk.subarray(cut.taken, (cut.taken += add)));
      want -= add;
    }
    if (pieces.length === 1) throw ended();
    [buffer, pos] = [Buffer.concat(pieces), 0];
  };
  /** After a row read in a joined buffer: back to the chunk its last bytes came from, when the rest lies in it. */
  const resume = () => {
    if (!cut || buffer.length - pos > cut.taken) return;
    [buffer, pos] = [cut.chunk, cut.taken - (buffer.length - pos)];
    cut = null;
  };
  while (buffer.length - pos < SIGNATURE.length + 8) more();
  if (!buffer.subarray(0, SIGNATURE.length).equals(SIGNATURE))
    throw new Error('Not a binary COPY stream: its signature is missing.');
  // Bit 16 says each row carries its OID first; bits 17-31 are for future formats a reader must refuse.
  if (int32(buffer, SIGNATURE.length) >>> 16 !== 0)
    throw new Error('A binary COPY stream with OIDs or of a later format: not read here.');
  const headerLength = SIGNATURE.length + 8 + (int32(buffer, SIGNATURE.length + 4) >>> 0);
  while (buffer.length - pos < headerLength) more();
  pos = headerLength;

  const rows: CopyRows = { length: 0, fields: -1, data: [], at: new Int32Array(0) };
  for (;;) {
    const end = buffer.length;
    if (end - pos < 2) {
      more();
      continue;
    }
    const fieldCount = int16(buffer, pos);
    if (fieldCount === -1) return rows; // the trailer
    if (rows.fields === -1) {
      if (fieldCount < 0) throw new Error(`A binary COPY row of ${fieldCount} fields.`);
      rows.fields = fieldCount;
    } else if (fieldCount !== rows.fields)
      throw new Error(`A binary COPY row of ${fieldCount} fields after rows of ${rows.fields}.`);
    if (rows.at.length < 2 * fieldCount * (rows.length + 1)) grow(rows, 2 * Math.max(rows.length, 16));
    const at = rows.at;
    const base = 2 * rows.length * fieldCount;
    let p = pos + 2;
    let whole = true;
    for (let i = base; i < base + 2 * fieldCount; i += 2) {
      if (end - p < 4) {
        whole = false;
        break;
      }
      const length = int32(buffer, p);
      if (length < -1) throw new Error(`A binary COPY field of length ${length}.`);
      p += 4;
      at[i] = p;
      at[i + 1] = length;
      if (length > 0) p += length;
    }
    if (!whole || p > end) {
      more(); // and read the row again from its start
      continue;
    }
    rows.data.push(buffer);
    // After the second row (the first may be of another kind: a run detail's head), room for as
    // many rows of its size as the stream holds, and some: one allocation, mostly.
    if (++rows.length === 2)
      grow(rows, Math.ceil((1.25 * chunks.reduce((sum, chunk) => sum + chunk.length, 0)) / (p - pos)) + 16);
    pos = p;
    resume();
  }
}
