/**
 * The binary COPY reader against streams written here by the format's rules, cut at every byte,
 * and against what Postgres itself sends; and `copyOut`, which runs a COPY on the pool.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { binaryCopyRow, fieldText } from '../../src/store/binary-copy.js';
import { postgresDb, type Db } from '../../src/store/db.js';
import { createTestDatabase, type TestDatabase } from '../support/services.js';

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

/** `bytes` cut into chunks of `size`, each a copy in memory of its own (as socket reads are). */
const cut = (bytes: Buffer, size: number) => Array.from({ length: Math.ceil(bytes.length / size) }, (_, i) => {
  const part = bytes.subarray(i * size, (i + 1) * size);
  const chunk = Buffer.alloc(part.length); // never from the shared pool
  part.copy(chunk);
  return chunk;
});

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
    // Each slice is memory of one of the chunks: writing into the chunks shows through.
    for (const chunk of chunks) chunk.fill('y'.charCodeAt(0));
    expect(Buffer.concat(field).toString()).toBe('y'.repeat(1000));
  });

  it('when the COPY had no row, then there is none', () => {
    expect(binaryCopyRow(cut(copyStream([]), 4))).toBeNull();
  });

  it('when the stream is not binary COPY, or ends early, then it throws', () => {
    expect(() => binaryCopyRow([Buffer.from('id\tname\n1\tfoo\n2\tbar\n')])).toThrow(/signature/);
    const stream = copyStream([['abcdef']]);
    expect(() => binaryCopyRow([stream.subarray(0, stream.length - 5)])).toThrow(/ended 3 bytes early/);
  });

  it('when the stream has OIDs or a length below -1, then it throws rather than misread the row', () => {
    const withOids = copyStream([['a']]);
    withOids.writeUInt32BE(1 << 16, SIGNATURE.length);
    expect(() => binaryCopyRow([withOids])).toThrow(/OIDs/);
    const stream = copyStream([['abc']]);
    stream.writeInt32BE(-5, SIGNATURE.length + 8 + 2);
    expect(() => binaryCopyRow([stream])).toThrow(/length -5/);
  });
});

describe('copyOut on Postgres', () => {
  let database: TestDatabase;
  let db: Db;
  beforeAll(async () => {
    // LATIN1: text reaches the daemon as UTF-8 only because pg's startup message asks for it, and
    // a run detail's COPY bytes go to the client as they came, labelled UTF-8.
    database = await createTestDatabase({ encoding: 'LATIN1' });
    db = postgresDb({ connectionString: database.url, max: 1, statementTimeoutMs: 300 });
  });
  afterAll(async () => {
    await db?.close();
    await database?.drop();
  });

  it('when Postgres sends a row, then its text fields read as Postgres wrote them, in UTF-8 from a LATIN1 database', async () => {
    const fields = binaryCopyRow(await db.copyOut!(`SELECT 42::text, NULL::text, repeat('é"\\ÿ', 100000)`))!;
    expect(fields.map(fieldText)).toEqual(['42', null, 'é"\\ÿ'.repeat(100000)]);
    expect(fields[2]!.length).toBeGreaterThan(1); // many chunks
    expect((await db.query<{ t: string }>(`SELECT 'é' AS t`)).rows[0]!.t).toBe('é');
  });

  it('when the COPY fails, then copyOut rejects with Postgres\'s error, and the pool goes on', async () => {
    await expect(db.copyOut!('SELECT 1 / 0')).rejects.toMatchObject({ code: '22012' });
    await expect(db.copyOut!('SELECT pg_sleep(2)::text')).rejects.toMatchObject({ code: '57014' });
    // One connection in the pool: it was dropped and made again, or it is whole.
    expect(fieldText(binaryCopyRow(await db.copyOut!(`SELECT 'after'`))![0]!)).toBe('after');
    expect((await db.query<{ n: number }>('SELECT 7 AS n')).rows[0]!.n).toBe(7);
  });
});
