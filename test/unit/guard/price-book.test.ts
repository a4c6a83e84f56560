/**
 * The price book remembers a model's active prices briefly: read once while fresh, read again
 * after a change through this daemon, and never remembering a failed read.
 */
import { describe, expect, it } from 'vitest';
import { PriceBook } from '../../../src/guard/price-book.js';
import type { Queryable } from '../../../src/store/db.js';

/** A database whose model_pricing holds `input` for every model of workspace `w`, counting reads. */
function pricing(input = '0.000001') {
  const reads: string[] = [];
  let failNext = false;
  const db = {
    query: async (_sql: string, params: unknown[]) => {
      reads.push(`${String(params[0])}/${String(params[1])}`);
      if (failNext) {
        failNext = false;
        throw new Error('down');
      }
      return {
        rows:
          params[0] === 'w' ? [{ input, output: input, cache_read: null, cache_write: null, long_above: null }] : [],
      };
    },
  } as unknown as Queryable;
  return { db, reads, failNext: () => (failNext = true) };
}

describe('price book', () => {
  it('when a model is asked for twice, then its prices are read once; another workspace or model is read apart', async () => {
    const { db, reads } = pricing();
    const book = new PriceBook(db);
    expect((await book.prices('w', 'gpt'))?.input).toBe('0.000001');
    expect((await book.prices('w', 'gpt'))?.input).toBe('0.000001');
    expect(await book.prices('v', 'gpt')).toBeNull();
    expect((await book.prices('w', 'other'))?.input).toBe('0.000001');
    expect(reads).toEqual(['w/gpt', 'v/gpt', 'w/other']);
  });

  it('when a model’s prices were read, then they are known without a promise until a change', async () => {
    const { db } = pricing();
    const book = new PriceBook(db);
    expect(book.known('w', 'gpt')).toBeUndefined();
    const read = book.prices('w', 'gpt');
    expect(book.known('w', 'gpt')).toBeUndefined(); // still being read
    await read;
    expect(book.known('w', 'gpt')?.input).toBe('0.000001');
    await book.prices('v', 'gpt');
    expect(book.known('v', 'gpt')).toBeNull(); // read: no price
    book.changed('w');
    expect(book.known('w', 'gpt')).toBeUndefined();
  });

  it('when a workspace’s prices change, then its models are read again and the others are not', async () => {
    const { db, reads } = pricing();
    const book = new PriceBook(db);
    await book.prices('w', 'gpt');
    await book.prices('v', 'gpt');
    book.changed('w');
    await book.prices('w', 'gpt');
    await book.prices('v', 'gpt');
    expect(reads).toEqual(['w/gpt', 'v/gpt', 'w/gpt']);
  });

  it('when a read fails, then it is not remembered', async () => {
    const { db, reads, failNext } = pricing();
    const book = new PriceBook(db);
    failNext();
    await expect(book.prices('w', 'gpt')).rejects.toThrow('down');
    expect((await book.prices('w', 'gpt'))?.input).toBe('0.000001');
    expect(reads).toEqual(['w/gpt', 'w/gpt']);
  });

  it('when a change overtakes a read under way, then that read is not remembered', async () => {
    const { db, reads } = pricing();
    const book = new PriceBook(db);
    const first = book.prices('w', 'gpt');
    book.changed('w');
    await first;
    await book.prices('w', 'gpt');
    expect(reads).toEqual(['w/gpt', 'w/gpt']);
  });

  it('when more models than it keeps are asked for, then it still answers each', async () => {
    const { db } = pricing();
    const book = new PriceBook(db);
    for (let i = 0; i < 10_050; i++) expect((await book.prices('w', `m${i}`))?.input).toBe('0.000001');
    expect((await book.prices('w', 'm10049'))?.input).toBe('0.000001');
  });
});
