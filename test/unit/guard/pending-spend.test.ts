/**
 * Pending spend: a check holds the entries of the moment it starts reading, adds them to what it
 * read, and reads again once one of the day's costs reached the counters meanwhile.
 */
import { describe, expect, it } from 'vitest';
import { PendingSpend } from '../../../src/guard/pending-spend.js';
import type { CounterScope } from '../../../src/store/counters/counters.js';

const scope = (userId: string): CounterScope => ({ workspaceId: 'w', userId, day: '2026-11-29', month: '2026-11' });
const read = { workspaceDailySpendMicros: 1_000, userDailySpendMicros: 100 };

describe('pending spend', () => {
  it('when costs are held, then a check adds those held as it started, its user’s to the user’s spend', () => {
    const pending = new PendingSpend();
    pending.add(scope('a'), 10);
    pending.add(scope('b'), 20);
    const held = pending.held(scope('a'));
    pending.add(scope('a'), 40); // after the check started: not among those it holds
    expect(held.overtaken()).toBe(false);
    expect(held.addTo(read)).toEqual({ workspaceDailySpendMicros: 1_030, userDailySpendMicros: 110 });
  });

  it('when a cost is released during the read, then the check is overtaken, and a copy still counts it', () => {
    const pending = new PendingSpend();
    const release = pending.add(scope('a'), 10);
    pending.add(scope('a'), 20);
    const held = pending.held(scope('a'));
    const copy = pending.heldCopy(scope('a'));
    release();
    release(); // twice: counted once
    expect(held.overtaken()).toBe(true);
    expect(copy.addTo(read)).toEqual({ workspaceDailySpendMicros: 1_030, userDailySpendMicros: 130 });
    const next = pending.held(scope('a'));
    expect(next.overtaken()).toBe(false);
    expect(next.addTo(read)).toEqual({ workspaceDailySpendMicros: 1_020, userDailySpendMicros: 120 });
  });

  it('when a cost added after the check started is released, then the check reads again', () => {
    const pending = new PendingSpend();
    pending.add(scope('a'), 10);
    const held = pending.held(scope('a'));
    pending.add(scope('a'), 20)();
    expect(held.overtaken()).toBe(true);
  });

  it('when a cost waits for its price, then the check waits for it and adds it once known', async () => {
    const pending = new PendingSpend();
    let price!: (micros: number) => void;
    pending.add(scope('a'), new Promise<number>((resolve) => (price = resolve)));
    const held = pending.held(scope('a'));
    const priced = held.priced();
    expect(priced).not.toBeNull();
    price(50);
    await priced;
    expect(held.addTo(read)).toEqual({ workspaceDailySpendMicros: 1_050, userDailySpendMicros: 150 });
    expect(pending.held(scope('a')).priced()).toBeNull();
  });

  it('when costs are released while a check waits for a price, then it still adds those it held', async () => {
    const pending = new PendingSpend();
    const first = pending.add(scope('a'), 10);
    let price!: (micros: number) => void;
    pending.add(scope('a'), new Promise<number>((resolve) => (price = resolve)));
    const held = pending.held(scope('a'));
    expect(held.overtaken()).toBe(false);
    const priced = held.priced();
    first(); // released during the wait: the day's first entry is no longer this one
    pending.add(scope('b'), 1_000);
    price(50);
    await priced;
    expect(held.addTo(read)).toEqual({ workspaceDailySpendMicros: 1_060, userDailySpendMicros: 160 });
  });

  it('when every cost of the day is released, then nothing is held', () => {
    const pending = new PendingSpend();
    pending.add(scope('a'), 10)();
    expect(pending.held(scope('a')).addTo(read)).toBe(read);
  });
});
