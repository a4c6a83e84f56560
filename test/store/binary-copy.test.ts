/**
 * The binary COPY reader against streams written here by the format's rules, cut at every byte,
 * and against what Postgres itself sends; and `copyOut`, which runs a COPY on the pool.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { binaryCopyRows, fieldText, field, type CopyRows } from '../../src/store/binary-copy.js';
import { postgresDb, type Db } from '../../src/store/db.js';
import { createTestDatabase, type TestDatabase } from '../support/services.js';

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');
const int16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeInt16BE(n);
  return b;
};
const int32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
};

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
const cut = (bytes: Buffer, size: number) =>
  Array.from({ length: Math.ceil(bytes.length / size) }, (_, i) => {
    const part = bytes.subarray(i * size, (i + 1) * size);
    const chunk = Buffer.alloc(part.length); // never from the shared pool
    part.copy(chunk);
    return chunk;
  });

/** Every row's fields as text. */
const texts = (rows: CopyRows) =>
  Array.from({ length: rows.length }, (_, r) => Array.from({ length: rows.fields }, (_, f) => fieldText(rows, r, f)));

describe('binaryCopyRows', () => {
  it('when the stream is cut anywhere, then every row reads as the same bytes', () => {
    // Enough rows to outgrow the offsets first sized from the first row's size.
    const rows = [
      ['12', null, '{"é":"😀"}'.repeat(20)],
      ...Array.from({ length: 100 }, (_, i) => [String(i), '', null]),
    ];
    const stream = copyStream(rows, 3);
    for (const size of [1, 2, 3, 5, 19, 64, 1000, stream.length])
      expect(texts(binaryCopyRows(cut(stream, size)))).toEqual(rows);
  });

  it('when a row spans many chunks, some of them empty, then it reads whole', () => {
    const big = 'é😀"'.repeat(30_000); // ~270 KB
    const chunks = cut(
      copyStream([['a'], [big, null], ['b', 'c']].map((row) => [...row, null].slice(0, 2))),
      1000,
    ).flatMap((chunk, i) => (i % 7 === 0 ? [Buffer.alloc(0), chunk] : [chunk]));
    expect(texts(binaryCopyRows(chunks))).toEqual([
      ['a', null],
      [big, null],
      ['b', 'c'],
    ]);
  });

  it('when a row lies within a chunk, then its fields are views of that chunk, not copies', () => {
    const chunks = cut(copyStream([['a'.repeat(300)], ['b'.repeat(300)], ['c'.repeat(300)]]), 400);
    const rows = binaryCopyRows(chunks);
    // The first row lies in the first chunk; the second is cut across two chunks (read as a copy).
    expect(rows.data[0]).toBe(chunks[0]);
    chunks[0]!.fill('y'.charCodeAt(0), 100); // the field starts at byte 25, past the header and its length
    expect(field(rows, 0, 0)!.toString()).toBe('a'.repeat(75) + 'y'.repeat(225));
    expect(field(rows, 1, 0)!.toString()).toBe('b'.repeat(300));
  });

  it('when the COPY had no row, then there are none', () => {
    expect(binaryCopyRows(cut(copyStream([]), 4)).length).toBe(0);
  });

  it('when the stream is not binary COPY, or ends early, or its rows differ in width, then it throws', () => {
    expect(() => binaryCopyRows([Buffer.from('id\tname\n1\tfoo\n2\tbar\n')])).toThrow(/signature/);
    const stream = copyStream([['abcdef']]);
    expect(() => binaryCopyRows([stream.subarray(0, stream.length - 5)])).toThrow(/ended early/);
    expect(() => binaryCopyRows(cut(copyStream([['a', 'b'], ['c']]), 7))).toThrow(/1 fields after rows of 2/);
  });

  it('when the stream has OIDs or a length below -1, then it throws rather than misread the row', () => {
    const withOids = copyStream([['a']]);
    withOids.writeUInt32BE(1 << 16, SIGNATURE.length);
    expect(() => binaryCopyRows([withOids])).toThrow(/OIDs/);
    const stream = copyStream([['abc']]);
    stream.writeInt32BE(-5, SIGNATURE.length + 8 + 2);
    expect(() => binaryCopyRows([stream])).toThrow(/length -5/);
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

  it('when Postgres sends rows, then their text fields read as Postgres wrote them, in UTF-8 from a LATIN1 database', async () => {
    const chunks = await db.copyOut(`SELECT n::text, NULL::text, repeat('é"\\ÿ', n) FROM generate_series(1, 3000) n`);
    expect(chunks.length).toBeGreaterThan(1);
    const rows = binaryCopyRows(chunks);
    expect(texts(rows)).toEqual(Array.from({ length: 3000 }, (_, i) => [String(i + 1), null, 'é"\\ÿ'.repeat(i + 1)]));
    expect((await db.query<{ t: string }>(`SELECT 'é' AS t`)).rows[0]!.t).toBe('é');
  });

  it("when the COPY fails, then copyOut rejects with Postgres's error, and the pool goes on", async () => {
    await expect(db.copyOut('SELECT 1 / 0')).rejects.toMatchObject({ code: '22012' });
    await expect(db.copyOut('SELECT pg_sleep(2)::text')).rejects.toMatchObject({ code: '57014' });
    // One connection in the pool: it was dropped and made again, or it is whole.
    expect(texts(binaryCopyRows(await db.copyOut(`SELECT 'after'`)))).toEqual([['after']]);
    expect((await db.query<{ n: number }>('SELECT 7 AS n')).rows[0]!.n).toBe(7);
  });
});
