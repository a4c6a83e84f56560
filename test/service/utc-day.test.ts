import { describe, expect, it } from 'vitest';
import { utcDay } from '../../src/utc-day.js';

describe('utcDay', () => {
  it.each([
    ['2026-11-26T23:59:59.999Z', '2026-11-26', '2026-11', '2026-11-27T00:00:00Z', '2026-12-01T00:00:00Z'],
    ['2026-11-27T00:00:00.000Z', '2026-11-27', '2026-11', '2026-11-28T00:00:00Z', '2026-12-01T00:00:00Z'],
    ['2026-12-31T12:00:00.000Z', '2026-12-31', '2026-12', '2027-01-01T00:00:00Z', '2027-01-01T00:00:00Z'],
    ['2028-02-28T08:00:00.000Z', '2028-02-28', '2028-02', '2028-02-29T00:00:00Z', '2028-03-01T00:00:00Z'],
    ['1970-01-01T00:00:00.000Z', '1970-01-01', '1970-01', '1970-01-02T00:00:00Z', '1970-02-01T00:00:00Z'],
  ])(
    'when the time is %s, then its day, month and their resets are the UTC ones',
    (at, day, month, dayEnd, monthEnd) => {
      expect(utcDay(new Date(at))).toEqual({ day, month, dayResetsAt: dayEnd, monthResetsAt: monthEnd });
    },
  );

  it('when asked again within the day, then the day is answered as kept, and a new day anew', () => {
    const morning = utcDay(new Date('2026-11-26T01:00:00Z'));
    expect(utcDay(new Date('2026-11-26T22:00:00Z'))).toBe(morning);
    expect(utcDay(new Date('2026-11-25T22:00:00Z')).day).toBe('2026-11-25');
    expect(utcDay(new Date('2026-11-26T22:00:00Z')).day).toBe('2026-11-26');
  });

  it('when the time is invalid, then it throws as toISOString does', () => {
    expect(() => utcDay(new Date(NaN))).toThrow(RangeError);
  });
});
