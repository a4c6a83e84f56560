import { describe, expect, it } from 'vitest';
import { everyCallRecorded, flat, meanIn, soakWindows } from '../../../bench/lib/soak-verdict.js';

describe("issue #49's soak verdict (bench/lib/soak-verdict.ts)", () => {
  it('when the soak lasts 30 minutes, then it compares the last 5 minutes with minutes 5 to 10', () => {
    expect(soakWindows(30)).toEqual({ reference: [300, 600], last: [1500, 1800], scaled: false });
  });

  it('when the soak lasts longer, then the windows stay the issue’s: minutes 5 to 10 and the last 5', () => {
    expect(soakWindows(45)).toEqual({ reference: [300, 600], last: [2400, 2700], scaled: false });
  });

  it('when a trial soak is shorter, then both windows scale with its length', () => {
    expect(soakWindows(3)).toEqual({ reference: [30, 60], last: [150, 180], scaled: true });
    expect(soakWindows(2)).toEqual({ reference: [20, 40], last: [100, 120], scaled: true });
  });

  it.each([
    [100, 110, true],
    [100, 90, true],
    [100, 110.5, false],
    [100, 89, false],
    [0, 0, false],
    [NaN, 100, false],
  ])('when the reference is %s and the last window %s, then flat is %s', (reference, last, pass) => {
    expect(flat(reference, last).pass).toBe(pass);
  });

  it.each([
    [{ answered: 1000, steps: 1000, withResult: 1000 }, true],
    [{ answered: 1000, steps: 999, withResult: 999 }, false],
    [{ answered: 1000, steps: 1000, withResult: 998 }, false],
    [{ answered: 1000, steps: 1001, withResult: 1000 }, false],
    [{ answered: 0, steps: 0, withResult: 0 }, false],
  ])('when the database holds %o, then every call recorded is %s', (counts, pass) => {
    expect(everyCallRecorded(counts)).toBe(pass);
  });

  it('when samples fall in and out of a window, then its mean reads only those inside [from, to)', () => {
    const samples = [
      { atS: 29.9, mb: 500 },
      { atS: 30, mb: 100 },
      { atS: 45, mb: 110 },
      { atS: 60, mb: 900 },
    ];
    expect(
      meanIn(
        samples,
        (s) => s.atS,
        (s) => s.mb,
        [30, 60],
      ),
    ).toBe(105);
    expect(
      meanIn(
        samples,
        (s) => s.atS,
        (s) => s.mb,
        [61, 70],
      ),
    ).toBeNaN();
  });
});
