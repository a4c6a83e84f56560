import { describe, expect, it } from 'vitest';
import { timeOrderedId } from '../../../src/store/time-ordered-id.js';

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const millis = (id: string) => parseInt(id.slice(0, 8) + id.slice(9, 13), 16);

describe('timeOrderedId', () => {
  it('when made at a given millisecond, then it is a UUIDv7 whose first 48 bits are that millisecond', () => {
    for (const ms of [0, 1, Date.UTC(2026, 10, 24, 3, 30, 0, 123), 2 ** 48 - 1]) {
      const id = timeOrderedId(ms);
      expect(id).toMatch(V7);
      expect(millis(id)).toBe(ms);
    }
  });

  it('when made at later milliseconds, then it sorts after, as text and as Postgres compares uuids', () => {
    const ids = [5, 6, 255, 256, 4096, Date.UTC(2026, 0, 1), Date.UTC(2026, 0, 1) + 1].map((ms) => timeOrderedId(ms));
    expect([...ids].sort()).toEqual(ids);
  });

  it('when many are made in one millisecond, then they differ in their random bits', () => {
    const ids = new Set(Array.from({ length: 10_000 }, () => timeOrderedId(1_700_000_000_000)));
    expect(ids.size).toBe(10_000);
  });

  it('when the time has no 48-bit millisecond (before 1970, past 2^48, not an integer), then it throws', () => {
    for (const ms of [-1, 2 ** 48, Number.NaN, 1.5, Infinity]) expect(() => timeOrderedId(ms)).toThrow(RangeError);
  });
});
