/**
 * The natural group commit on its own, with a recording fake for the batch write (a pure utility:
 * the statements it drives are tested against real stores in step-batches.test.ts). The fake
 * holds each batch open until the test releases it, so "in flight" is a state the test controls.
 */
import { describe, expect, it } from 'vitest';
import { GroupCommit } from '../../../src/store/group-commit.js';

/** A batch write that records each batch and answers only when released. */
class HeldWrites<I, O> {
  readonly batches: I[][] = [];
  private readonly pending: { resolve: () => void }[] = [];

  constructor(private readonly answer: (item: I) => O | Error | Promise<O | Error>) {}

  readonly write = async (items: I[]): Promise<(O | Error)[]> => {
    this.batches.push([...items]);
    await new Promise<void>((resolve) => this.pending.push({ resolve }));
    // eslint-disable-next-line @typescript-eslint/await-thenable -- an answer may be a promise, or not
    return Promise.all(items.map((item) => this.answer(item)));
  };

  /** Lets the oldest batch in flight answer; waits until it has been taken up. */
  async release(): Promise<void> {
    await until(() => this.pending.length > 0);
    this.pending.shift()!.resolve();
  }

  get sizes(): number[] {
    return this.batches.map((b) => b.length);
  }
}

/** Polls a condition across macrotasks (every promise settled so far has run), failing after 1 s. */
async function until(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 1_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met within 1 s');
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** A promise's state once everything ready to run has run, without waiting for it to settle. */
async function state(promise: Promise<unknown>): Promise<'pending' | 'resolved' | 'rejected'> {
  let seen: 'pending' | 'resolved' | 'rejected' = 'pending';
  promise.then(
    () => (seen = 'resolved'),
    () => (seen = 'rejected'),
  );
  await new Promise((resolve) => setImmediate(resolve));
  return seen;
}

/** Fails rather than hangs when a promise never settles. */
function within<T>(promise: Promise<T>, ms = 1_000): Promise<T> {
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`not settled within ${ms} ms`)), ms)),
  ]);
}

describe('GroupCommit', () => {
  it('when one item is submitted alone, then it is written at once in a batch of one', async () => {
    const writes = new HeldWrites<number, string>((n) => `ok ${n}`);
    const group = new GroupCommit(writes.write);
    const answer = group.submit(1);
    // No timer, no tick: the write started synchronously inside submit.
    expect(writes.batches).toEqual([[1]]);
    await writes.release();
    expect(await answer).toBe('ok 1');
  });

  it('when items are submitted while a batch is in flight, then they are written together in the next batch', async () => {
    const writes = new HeldWrites<number, number>((n) => n * 10);
    const group = new GroupCommit(writes.write);
    const first = group.submit(1);
    const waiting = [2, 3, 4, 5].map((n) => group.submit(n));
    expect(writes.sizes).toEqual([1]); // the four wait for the one in flight
    await writes.release();
    await until(() => writes.batches.length === 2);
    const late = group.submit(6); // arrives while the second batch is in flight
    await writes.release();
    await writes.release();

    expect(await first).toBe(10);
    expect(await Promise.all(waiting)).toEqual([20, 30, 40, 50]);
    expect(await late).toBe(60);
    expect(writes.batches).toEqual([[1], [2, 3, 4, 5], [6]]);
  });

  it('when the write answers an Error for one item, then only that item rejects', async () => {
    const writes = new HeldWrites<number, number>((n) => (n === 3 ? new Error('bad 3') : n));
    const group = new GroupCommit(writes.write);
    const first = group.submit(0);
    const answers = [1, 2, 3, 4].map((n) => group.submit(n));
    await writes.release();
    await writes.release();

    const settled = await Promise.allSettled([first, ...answers]);
    expect(settled.map((s) => (s.status === 'fulfilled' ? s.value : (s.reason as Error).message))).toEqual([
      0,
      1,
      2,
      'bad 3',
      4,
    ]);
    // Answered per item: nothing was written again.
    expect(writes.sizes).toEqual([1, 4]);
  });

  it('when a whole batch throws, then each item is written alone and only the bad one rejects', async () => {
    const batches: number[][] = [];
    const refused = new Error('invalid input in item 3');
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const group = new GroupCommit<number, number>(async (items) => {
      batches.push([...items]);
      if (batches.length === 1) await held;
      // Like one statement: a bad item fails all of it.
      if (items.includes(3)) throw refused;
      return items.map((n) => n * 2);
    });
    const first = group.submit(0);
    const answers = [1, 2, 3, 4].map((n) => group.submit(n));
    release();

    const settled = await Promise.allSettled([first, ...answers]);
    expect(settled.map((s) => (s.status === 'fulfilled' ? s.value : s.reason))).toEqual([0, 2, 4, refused, 8]);
    expect(batches).toEqual([[0], [1, 2, 3, 4], [1], [2], [3], [4]]);
  });

  it('when a batch fails in a way retryAlone does not accept, then every item rejects with it and nothing is written again', async () => {
    const batches: number[][] = [];
    const down = Object.assign(new Error('connection lost'), { code: 'ECONNRESET' });
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const group = new GroupCommit<number, number>(
      async (items) => {
        batches.push([...items]);
        if (batches.length === 1) {
          await held;
          return items;
        }
        throw down;
      },
      { retryAlone: (error) => (error as { code?: string }).code !== 'ECONNRESET' },
    );
    const first = group.submit(0);
    const answers = [1, 2, 3].map((n) => group.submit(n));
    release();

    const settled = await Promise.allSettled([first, ...answers]);
    expect(settled.map((s) => (s.status === 'fulfilled' ? s.value : s.reason))).toEqual([0, down, down, down]);
    expect(batches).toEqual([[0], [1, 2, 3]]);
  });

  it('when a lone item throws, then it rejects with that error and is not written again', async () => {
    const batches: number[][] = [];
    const group = new GroupCommit<number, number>(async (items) => {
      batches.push(items);
      throw new Error('refused');
    });
    await expect(group.submit(7)).rejects.toThrow('refused');
    expect(batches).toEqual([[7]]);
  });

  it('when a batch throws a non-Error, then the bad item rejects with an Error carrying it', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let calls = 0;
    const group = new GroupCommit<string, string>(async (items) => {
      if (++calls === 1) await held;
      if (items.includes('bad')) throw 'a string, not an Error'; // eslint-disable-line @typescript-eslint/only-throw-error
      return items;
    });
    const first = group.submit('first');
    const good = group.submit('good');
    const bad = group.submit('bad');
    release();
    expect(await first).toBe('first');
    expect(await good).toBe('good');
    await expect(bad).rejects.toThrow(new Error('a string, not an Error'));
  });

  it('when more than maxBatch items wait, then they are written in batches of at most maxBatch, in order', async () => {
    const writes = new HeldWrites<number, number>((n) => n);
    const group = new GroupCommit(writes.write, { maxBatch: 3 });
    const answers = Array.from({ length: 8 }, (_, n) => group.submit(n));
    for (let i = 0; i < 4; i++) await writes.release();

    expect(await Promise.all(answers)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(writes.batches).toEqual([[0], [1, 2, 3], [4, 5, 6], [7]]);
  });

  it('when items are queued behind a batch in flight, then settled() resolves only after they are written', async () => {
    const writes = new HeldWrites<number, number>((n) => n);
    const group = new GroupCommit(writes.write);
    const answers = [1, 2, 3].map((n) => group.submit(n));
    const settled = group.settled();
    await writes.release();
    await until(() => writes.batches.length === 2);
    expect(await state(settled)).toBe('pending'); // [2, 3] are still being written
    await writes.release();
    await within(settled);
    expect(await Promise.all(answers.map(state))).toEqual(['resolved', 'resolved', 'resolved']);
    expect(writes.sizes).toEqual([1, 2]);
  });

  it('when batches must start an interval apart, then items submitted at different moments within it share one batch', async () => {
    const batchesOf = async (minIntervalMs: number) => {
      const batches: number[][] = [];
      const group = new GroupCommit<number, number>(
        async (items) => {
          batches.push(items);
          return items;
        },
        { minIntervalMs },
      );
      await group.submit(1);
      const second = group.submit(2);
      await new Promise((resolve) => setTimeout(resolve, 20));
      const third = group.submit(3);
      await within(Promise.all([second, third]), 2_000);
      return batches;
    };
    expect(await batchesOf(0)).toEqual([[1], [2], [3]]);
    expect(await batchesOf(500)).toEqual([[1], [2, 3]]);
  });

  it('when full batches are waiting, then they go at once, whatever the interval', async () => {
    const writes = new HeldWrites<number, number>((n) => n);
    const group = new GroupCommit(writes.write, { maxBatch: 3, minIntervalMs: 60_000 });
    const answers = [1, 2, 3, 4, 5, 6, 7].map((n) => group.submit(n));
    for (let i = 0; i < 3; i++) await writes.release();
    expect(await within(Promise.all(answers))).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(writes.batches).toEqual([[1], [2, 3, 4], [5, 6, 7]]);
  });

  it('when an item comes after a quiet spell longer than the interval, then it is written at once', async () => {
    const batches: number[][] = [];
    const group = new GroupCommit<number, number>(
      async (items) => {
        batches.push(items);
        return items;
      },
      { minIntervalMs: 50 },
    );
    await group.submit(1);
    await new Promise((resolve) => setTimeout(resolve, 80));
    const late = group.submit(2);
    expect(batches).toEqual([[1], [2]]); // started inside submit, with no wait
    await within(late);
  });

  it('when items must wait a least delay, then even one after a quiet spell waits it, and the items submitted meanwhile share its batch', async () => {
    const batches: { items: number[]; at: number }[] = [];
    const group = new GroupCommit<number, number>(
      async (items) => {
        batches.push({ items, at: performance.now() });
        return items;
      },
      { minDelayMs: 60 },
    );
    const submitted = performance.now();
    const first = group.submit(1);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(batches).toEqual([]); // nothing written yet, though nothing was written before either
    const second = group.submit(2);
    expect(await within(Promise.all([first, second]), 2_000)).toEqual([1, 2]);
    expect(batches.map((b) => b.items)).toEqual([[1, 2]]);
    expect(batches[0]!.at - submitted).toBeGreaterThanOrEqual(55); // timers may fire a millisecond or so early
  });

  it('when a full batch is waiting, then it goes at once, whatever the least delay', async () => {
    const batches: number[][] = [];
    const group = new GroupCommit<number, number>(
      async (items) => {
        batches.push(items);
        return items;
      },
      { maxBatch: 2, minDelayMs: 60_000 },
    );
    const answers = [group.submit(1), group.submit(2)];
    expect(await within(Promise.all(answers))).toEqual([1, 2]);
    expect(batches).toEqual([[1, 2]]);
  });

  it('when nothing was submitted, then settled() resolves at once', async () => {
    const group = new GroupCommit<number, number>(async (items) => items);
    await expect(within(group.settled(), 100)).resolves.toBeUndefined();
  });

  it('when a caller submits again as soon as its last answer arrives, then the new item is still written', async () => {
    // A sequential writer: each submit follows the previous answer in the very next microtask,
    // while the batch that answered is winding down.
    const batches: number[][] = [];
    const group = new GroupCommit<number, number>(async (items) => {
      batches.push(items);
      return items;
    });
    const written: number[] = [];
    const sequential = (async () => {
      for (const n of [1, 2, 3]) written.push(await group.submit(n));
    })();
    await within(sequential);
    expect(written).toEqual([1, 2, 3]);
    expect(batches).toEqual([[1], [2], [3]]);
    await within(group.settled(), 100);
  });
});
