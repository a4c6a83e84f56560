import { describe, expect, it, vi } from 'vitest';
import { isTimeZone, localDate, localDay, periodWindow, scannedWindows, startOfLocalDate } from '../../src/periods.js';

const at = (iso: string) => new Date(iso);

describe('periods in a time zone', () => {
  it('when the zone is America/New_York, then the day turns at local midnight (05:00Z in winter, 04:00Z in summer)', () => {
    expect(localDay(at('2026-01-15T04:59:59.999Z'), 'America/New_York').day).toBe('2026-01-14');
    expect(localDay(at('2026-01-15T05:00:00.000Z'), 'America/New_York').day).toBe('2026-01-15');
    expect(localDay(at('2026-07-15T03:59:59.999Z'), 'America/New_York').day).toBe('2026-07-14');
    const summer = localDay(at('2026-07-15T04:00:00.000Z'), 'America/New_York');
    expect(summer.day).toBe('2026-07-15');
    expect(summer.dayResetsAt).toBe('2026-07-16T04:00:00Z');
  });

  it('when the zone is Asia/Kolkata (UTC+05:30), then the day, week and month turn at 18:30Z the evening before', () => {
    expect(localDay(at('2026-11-30T18:29:59.999Z'), 'Asia/Kolkata').day).toBe('2026-11-30');
    const december = localDay(at('2026-11-30T18:30:00.000Z'), 'Asia/Kolkata');
    expect(december).toMatchObject({
      day: '2026-12-01',
      month: '2026-12',
      monthStart: '2026-12-01',
      // 2026-12-01 is a Tuesday: its week started on Monday the 30th.
      weekStart: '2026-11-30',
      dayResetsAt: '2026-12-01T18:30:00Z',
      weekResetsAt: '2026-12-06T18:30:00Z',
      monthResetsAt: '2026-12-31T18:30:00Z',
    });
  });

  it('when the clocks go forward (New York, 2026-03-08), then that day has 23 hours and the next starts at local midnight', () => {
    const day = localDay(at('2026-03-08T12:00:00Z'), 'America/New_York');
    expect(day.day).toBe('2026-03-08');
    expect(new Date(day.dayStartMs).toISOString()).toBe('2026-03-08T05:00:00.000Z');
    expect(day.dayResetsAt).toBe('2026-03-09T04:00:00Z');
    expect(day.dayEndMs - day.dayStartMs).toBe(23 * 3_600_000);
    // Its week (Monday 2 March to Sunday 8 March) ends with it.
    expect(day.weekStart).toBe('2026-03-02');
    expect(day.weekResetsAt).toBe('2026-03-09T04:00:00Z');
  });

  it('when the clocks go back (New York, 2026-11-01), then that day has 25 hours', () => {
    const day = localDay(at('2026-11-01T12:00:00Z'), 'America/New_York');
    expect(day.day).toBe('2026-11-01');
    expect(new Date(day.dayStartMs).toISOString()).toBe('2026-11-01T04:00:00.000Z');
    expect(day.dayResetsAt).toBe('2026-11-02T05:00:00Z');
    expect(day.dayEndMs - day.dayStartMs).toBe(25 * 3_600_000);
    // 01:30 happens twice that night: both are the 1st.
    expect(localDay(at('2026-11-01T05:30:00Z'), 'America/New_York').day).toBe('2026-11-01');
    expect(localDay(at('2026-11-01T06:30:00Z'), 'America/New_York').day).toBe('2026-11-01');
    // The month that holds the change ends at local midnight, in winter time.
    expect(day.monthResetsAt).toBe('2026-12-01T05:00:00Z');
  });

  it('when a zone skips midnight itself (America/Santiago, 2026-09-06), then the day starts at its first local instant', () => {
    const start = startOfLocalDate('2026-09-06', 'America/Santiago');
    expect(new Date(start).toISOString()).toBe('2026-09-06T04:00:00.000Z');
  });

  it('when the month turns in UTC, then the week and month windows are the calendar ones', () => {
    const local = localDay(at('2026-03-01T00:00:00Z'), 'UTC');
    expect(periodWindow(local, 'day')).toEqual({ firstDay: '2026-03-01', resetsAt: '2026-03-02T00:00:00Z' });
    // 2026-03-01 is a Sunday.
    expect(periodWindow(local, 'week')).toEqual({ firstDay: '2026-02-23', resetsAt: '2026-03-02T00:00:00Z' });
    expect(periodWindow(local, 'month')).toEqual({ firstDay: '2026-03-01', resetsAt: '2026-04-01T00:00:00Z' });
    expect(localDay(at('2026-12-31T23:59:59Z'), 'UTC').monthResetsAt).toBe('2027-01-01T00:00:00Z');
  });

  it('when asked again within the day, then the kept day is answered', () => {
    const morning = localDay(at('2026-05-05T01:00:00Z'), 'Europe/Paris');
    expect(localDay(at('2026-05-05T20:00:00Z'), 'Europe/Paris')).toBe(morning);
    expect(localDay(at('2026-05-05T22:30:00Z'), 'Europe/Paris').day).toBe('2026-05-06');
  });

  it("when a threshold scan runs on a window's first local day, then it looks at the window just over too", () => {
    // 00:10 on Tuesday 1 December in Kolkata (18:40Z the day before).
    const first = localDay(at('2026-11-30T18:40:00Z'), 'Asia/Kolkata');
    expect(scannedWindows(first, 'month')).toEqual([
      { period: 'month', firstDay: '2026-12-01', lastDay: '2026-12-31', resetsAt: '2026-12-31T18:30:00Z' },
      { period: 'month', firstDay: '2026-11-01', lastDay: '2026-11-30', resetsAt: '2026-11-30T18:30:00Z' },
    ]);
    expect(scannedWindows(first, 'week')).toEqual([
      { period: 'week', firstDay: '2026-11-30', lastDay: '2026-12-06', resetsAt: '2026-12-06T18:30:00Z' },
    ]);
    expect(scannedWindows(first, 'day').map((w) => w.firstDay)).toEqual(['2026-12-01', '2026-11-30']);
    // Monday 7 December: the week before (a Monday to a Sunday) is looked at, all day long.
    const monday = localDay(at('2026-12-07T12:00:00Z'), 'Asia/Kolkata');
    expect(scannedWindows(monday, 'week')[1]).toEqual({
      period: 'week',
      firstDay: '2026-11-30',
      lastDay: '2026-12-06',
      resetsAt: '2026-12-06T18:30:00Z',
    });
    expect(scannedWindows(monday, 'month')).toHaveLength(1);
  });

  it("when the zone is UTC, then each date is ICU's (Etc/UTC), around midnights, leap days and the years' ends", () => {
    const instants = [
      '1970-01-01T00:00:00.000Z',
      '1999-12-31T23:59:59.999Z',
      '2000-01-01T00:00:00.000Z',
      '2024-02-29T12:00:00.000Z',
      '2026-11-29T23:59:59.999Z',
      '2026-11-30T00:00:00.000Z',
      '9999-12-31T23:59:59.999Z',
      '+010000-01-01T00:00:00.000Z',
    ].map((iso) => Date.parse(iso));
    for (let ms = Date.parse('2026-01-01T00:00:00Z'); ms < Date.parse('2027-01-01T00:00:00Z'); ms += 7 * 3_600_000 + 1)
      instants.push(ms);
    for (const ms of instants) expect(localDate(ms, 'UTC')).toBe(localDate(ms, 'Etc/UTC'));
  });

  it('when the zone is UTC, then no DateTimeFormat is made: ICU stays out of the daemon', () => {
    const made = vi.spyOn(Intl, 'DateTimeFormat');
    try {
      expect(isTimeZone('UTC')).toBe(true);
      expect(localDay(at('2031-05-17T10:00:00Z'), 'UTC')).toMatchObject({ day: '2031-05-17', weekStart: '2031-05-12' });
      expect(made).not.toHaveBeenCalled();
    } finally {
      made.mockRestore();
    }
  });

  it('when a name is not a zone, then it is refused', () => {
    expect(isTimeZone('Mars/Olympus_Mons')).toBe(false);
    expect(isTimeZone('')).toBe(false);
    expect(isTimeZone('Asia/Kolkata')).toBe(true);
    expect(isTimeZone('UTC')).toBe(true);
    expect(() => localDay(new Date(NaN), 'UTC')).toThrow(RangeError);
  });
});
