/**
 * Reads the rows of `COPY ... TO STDOUT (FORMAT binary)` from the chunks Postgres sent. A row's
 * fields are found in place: each row is a buffer and each field an offset and a length in it, so
 * reading a thousand rows makes a thousand small objects, not one per field. A row cut across two
 * chunks (one a chunk, as a socket read them) is joined into one buffer first.
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
  return rows.at[i + 1]! < 0 ? null : rows.data[r]!.subarray(rows.at[i]!, rows.at[i]! + rows.at[i + 1]!);
}

/** A text field's value as a string. */
export const fieldText = (rows: CopyRows, r: number, f: number): string | null => field(rows, r, f)?.toString('utf8') ?? null;

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
  /** The chunk a row cut at its end continues in, and how much of it the joined buffer holds. */
  let cut: { chunk: Buffer; taken: number } | null = null;
  /**
   * Makes the rest of the buffer from `pos` longer: past a cut, by as much again of the chunk it
   * continues in (a row's bytes, not the chunk's), else by the next chunk.
   */
  const more = () => {
    if (cut && cut.taken < cut.chunk.length) {
      const add = Math.min(Math.max(cut.taken, 1024), cut.chunk.length - cut.taken);
      buffer = Buffer.concat([buffer.subarray(pos), cut.chunk.subarray(cut.taken, cut.taken + add)]);
      cut.taken += add;
      pos = 0;
      return;
    }
    const chunk = chunks[next++];
    if (!chunk) throw new Error('The binary COPY stream ended early.');
    if (pos === buffer.length) {
      buffer = chunk; // a row that starts a chunk is read in place
      cut = null;
    } else {
      cut = { chunk, taken: 0 };
      more();
    }
    pos = 0;
  };
  /** After a row read in a joined buffer: back to the chunk it continued in, past that row. */
  const resume = () => {
    if (!cut) return;
    const consumedOfChunk = cut.taken - (buffer.length - pos);
    buffer = cut.chunk;
    pos = consumedOfChunk;
    cut = null;
  };
  while (buffer.length - pos < SIGNATURE.length + 8) more();
  if (!buffer.subarray(0, SIGNATURE.length).equals(SIGNATURE)) throw new Error('Not a binary COPY stream: its signature is missing.');
  // Bit 16 says each row carries its OID first; bits 17-31 are for future formats a reader must refuse.
  if (int32(buffer, SIGNATURE.length) >>> 16 !== 0) throw new Error('A binary COPY stream with OIDs or of a later format: not read here.');
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
    } else if (fieldCount !== rows.fields) throw new Error(`A binary COPY row of ${fieldCount} fields after rows of ${rows.fields}.`);
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
    // After the first row, room for as many as its size goes into the stream, and some: one allocation, mostly.
    if (rows.length++ === 0) grow(rows, Math.ceil((1.25 * chunks.reduce((sum, chunk) => sum + chunk.length, 0)) / (p - pos)) + 16);
    pos = p;
    resume();
  }
}
