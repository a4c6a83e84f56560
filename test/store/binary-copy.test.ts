/**
 * The binary COPY reader against streams written here by the format's rules, cut at every byte,
 * and against what Postgres itself sends.
 */
import pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import { describe, expect, it } from 'vitest';
import { binaryCopyRow, fieldText } from '../../src/store/binary-copy.js';
import { ADMIN_DATABASE_URL } from '../support/services.js';

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');
const int16 = (n: number) => { const b = Buffer.alloc(2); b.writeInt16BE(n); return b; };
const int32 = (n: number) => { const b = Buffer.alloc(4); b.writeInt32BE(n); return b; };

/** A binary COPY stream of `rows` (text fields; null is SQL NULL), with a header extension of `extension` bytes. */
function copyStream(rows: (string | null)[][], extension = 0): Buffer {
  const parts = [SIGNATURE, int32(0), int32(extension), Buffer.alloc(extension, 7)];
  for (const row of rows) {
    parts.push(int16(row.length));
    for (const field of row) {
      if (field === null) parts.push(int32(-1));
      else parts.push(int32(Buffer.byteLength(field)), Buffer.from(field));
    }
  }
  parts.push(int16(-1));
  return Buffer.concat(parts);
}

/** `bytes` cut into chunks of `size`. */
const cut = (bytes: Buffer, size: number) =>
  Array.from({ length: Math.ceil(bytes.length / size) }, (_, i) => bytes.subarray(i * size, (i + 1) * size));

describe('binaryCopyRow', () => {
  it('when the stream is cut anywhere, then the fields are the same bytes', () => {
    const stream = copyStream([['12', null, '{"é":"😀"}'.repeat(20)]], 3);
    for (const size of [1, 2, 3, 5, 19, 64, stream.length]) {
      const fields = binaryCopyRow(cut(stream, size))!;
      expect(fields.map(fieldText)).toEqual(['12', null, '{"é":"😀"}'.repeat(20)]);
    }
  });

  it('when the big field is read, then it is slices of the chunks, not a copy', () => {
    const text = 'x'.repeat(1000);
    const chunks = cut(copyStream([[text]]), 100);
    const field = binaryCopyRow(chunks)![0]!;
    expect(field.length).toBeGreaterThan(1);
    expect(field.every((slice) => chunks.some((chunk) => chunk.buffer === slice.buffer))).toBe(true);
  });

  it('when the COPY had no row, then there is none', () => {
    expect(binaryCopyRow(cut(copyStream([]), 4))).toBeNull();
  });

  it('when the stream is not binary COPY, or ends early, then it throws', () => {
    expect(() => binaryCopyRow([Buffer.from('id\tname\n1\tfoo\n2\tbar\n')])).toThrow(/signature/);
    const stream = copyStream([['abcdef']]);
    expect(() => binaryCopyRow([stream.subarray(0, stream.length - 5)])).toThrow(/ended 3 bytes early/);
  });

  it('when Postgres sends a row, then its text fields read as Postgres wrote them', async () => {
    const client = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
    await client.connect();
    try {
      const chunks: Buffer[] = [];
      const stream = client.query(copyTo(`COPY (SELECT 42::text, NULL::text, repeat('é😀"', 50000)) TO STDOUT (FORMAT binary)`));
      for await (const chunk of stream) chunks.push(chunk as Buffer);
      const fields = binaryCopyRow(chunks)!;
      expect(fields.map(fieldText)).toEqual(['42', null, 'é😀"'.repeat(50000)]);
    } finally {
      await client.end();
    }
  });
});
