/**
 * Reads the one row of `COPY ... TO STDOUT (FORMAT binary)` from the chunks Postgres sent, without
 * joining them: each field comes back as slices of those chunks. A text field is its UTF-8 bytes
 * as they are, so a large answer Postgres wrote can go to a socket without ever being a string.
 * The format: https://www.postgresql.org/docs/current/sql-copy.html#id-1.9.3.55.9.4
 */

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');

/** A field's bytes, as slices of the chunks it spans; null for SQL NULL. */
export type CopyField = Buffer[] | null;

/** The first row's fields; null when the COPY had no row. */
export function binaryCopyRow(chunks: readonly Buffer[]): CopyField[] | null {
  const reader = new ChunkReader(chunks);
  if (!reader.take(SIGNATURE.length).equals(SIGNATURE)) throw new Error('Not a binary COPY stream: its signature is missing.');
  // Bit 16 says each row carries its OID first; bits 17-31 are for future formats a reader must refuse.
  if (reader.take(4).readUInt32BE() >>> 16 !== 0) throw new Error('A binary COPY stream with OIDs or of a later format: not read here.');
  reader.take(reader.take(4).readUInt32BE()); // header extension
  const fieldCount = reader.take(2).readInt16BE();
  if (fieldCount === -1) return null; // the trailer: no row
  const fields: CopyField[] = [];
  for (let i = 0; i < fieldCount; i++) {
    const length = reader.take(4).readInt32BE();
    if (length < -1) throw new Error(`A binary COPY field of length ${length}.`);
    fields.push(length === -1 ? null : reader.slices(length));
  }
  return fields;
}

/** A text field's value as a string (for the small ones). */
export const fieldText = (field: CopyField): string | null => (field === null ? null : Buffer.concat(field).toString('utf8'));

/** Reads forward across chunk boundaries; copies only what a fixed-size read spans. */
class ChunkReader {
  private index = 0;
  private offset = 0;

  constructor(private readonly chunks: readonly Buffer[]) {}

  /** The next `n` bytes as one Buffer. */
  take(n: number): Buffer {
    const parts = this.slices(n);
    return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
  }

  /** The next `n` bytes as slices of the chunks, not copied. */
  slices(n: number): Buffer[] {
    const parts: Buffer[] = [];
    for (let left = n; left > 0;) {
      const chunk = this.chunks[this.index];
      if (!chunk) throw new Error(`The binary COPY stream ended ${left} bytes early.`);
      const part = chunk.subarray(this.offset, this.offset + left);
      parts.push(part);
      left -= part.length;
      this.offset += part.length;
      if (this.offset === chunk.length) {
        this.index++;
        this.offset = 0;
      }
    }
    return parts;
  }
}
