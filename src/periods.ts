/**
 * Budget periods in a workspace's time zone: a day, an ISO week (from Monday) and a calendar month
 * start at local midnight. A day is 23 or 25 hours long where the clocks change; where a zone skips
 * midnight itself, the day starts at its first local instant. Pure: the moment is an argument.
 */

export type Period = 'day' | 'week' | 'month';

export const PERIODS: readonly Period[] = ['day', 'week', 'month'];

export const DEFAULT_TIME_ZONE = 'UTC';

/** What the counters and the rules read of a moment in a zone. Dates are local, `YYYY-MM-DD`. */
export interface LocalDay {
  readonly timeZone: string;
  /** Today's local date: the key of the day's spend records. */
  readonly day: string;
  /** `YYYY-MM`: the month's key. */
  readonly month: string;
  /** The first local date of this ISO week (a Monday) and of this month. */
  readonly weekStart: string;
  readonly monthStart: string;
  /** When today, this week and this month end (ISO 8601 UTC, `...Z`): what resets say. */
  readonly dayResetsAt: string;
  readonly weekResetsAt: string;
  readonly monthResetsAt: string;
  /** Today's start, as epoch milliseconds. */
  readonly dayStartMs: number;
  readonly dayEndMs: number;
}

const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(timeZone: string): Intl.DateTimeFormat {
  let format = formatters.get(timeZone);
  if (!format) {
    format = new Intl.DateTimeFormat('en-US', {
      timeZone,
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hourCycle: 'h23',
    });
    formatters.set(timeZone, format);
  }
  return format;
}

/** Whether `name` is a time zone this runtime knows (IANA names, `UTC`). */
export function isTimeZone(name: string): boolean {
  if (name === 'UTC') return true;
  if (name.length === 0 || name.length > 64) return false;
  try {
    formatter(name);
    return true;
  } catch {
    return false;
  }
}

/** 10000-01-01T00:00:00Z: before it, an instant's ISO 8601 form starts with its four-digit date. */
const YEAR_10000_MS = 253_402_300_800_000;

/**
 * The local date of an instant, `YYYY-MM-DD`. In UTC (the default zone) it is the ISO form's
 * date, and ICU is never asked: its first DateTimeFormat makes ICU's data resident in the daemon
 * (docs/performance.md, "The daemon's memory"), for a daemon whose workspaces may all count in
 * UTC. A zone of their own, or a year past the ISO form's four digits, takes ICU's way.
 */
export function localDate(ms: number, timeZone: string): string {
  if (timeZone === 'UTC' && ms >= 0 && ms < YEAR_10000_MS) return new Date(ms).toISOString().slice(0, 10);
  let year = '';
  let month = '';
  let day = '';
  for (const part of formatter(timeZone).formatToParts(ms)) {
    if (part.type === 'year') year = part.value;
    else if (part.type === 'month') month = part.value;
    else if (part.type === 'day') day = part.value;
  }
  return `${year.padStart(4, '0')}-${month}-${day}`;
}

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;

/**
 * The first instant of a local date. Offsets lie within UTC-12 and UTC+14, and clocks change on
 * whole minutes: a search by minutes between those bounds finds it, whatever the change.
 */
export function startOfLocalDate(date: string, timeZone: string): number {
  const midnightUtc = Date.parse(`${date}T00:00:00Z`);
  let low = (midnightUtc - 15 * HOUR_MS) / MINUTE_MS;
  let high = (midnightUtc + 13 * HOUR_MS) / MINUTE_MS;
  // Invariant: at `low` the local date is before `date`, at `high` it is `date` or later.
  while (high - low > 1) {
    const middle = Math.floor((low + high) / 2);
    if (localDate(middle * MINUTE_MS, timeZone) < date) low = middle;
    else high = middle;
  }
  return high * MINUTE_MS;
}

/** A local date moved by whole days (calendar arithmetic, no zone involved). */
export function addDays(date: string, days: number): string {
  const ms = Date.parse(`${date}T00:00:00Z`) + days * 86_400_000;
  return new Date(ms).toISOString().slice(0, 10);
}

const iso = (ms: number): string => new Date(ms).toISOString().replace('.000Z', 'Z');

function nextMonthStart(date: string): string {
  const year = Number(date.slice(0, 4));
  const month = Number(date.slice(5, 7));
  return month === 12 ? `${year + 1}-01-01` : `${date.slice(0, 4)}-${String(month + 1).padStart(2, '0')}-01`;
}

function computeLocalDay(ms: number, timeZone: string): LocalDay {
  const day = localDate(ms, timeZone);
  // Monday is 0: ISO weeks start on Monday.
  const weekday = (new Date(`${day}T00:00:00Z`).getUTCDay() + 6) % 7;
  const weekStart = addDays(day, -weekday);
  const monthStart = `${day.slice(0, 7)}-01`;
  const dayStartMs = startOfLocalDate(day, timeZone);
  const dayEndMs = startOfLocalDate(addDays(day, 1), timeZone);
  return {
    timeZone,
    day,
    month: day.slice(0, 7),
    weekStart,
    monthStart,
    dayResetsAt: iso(dayEndMs),
    weekResetsAt: iso(startOfLocalDate(addDays(weekStart, 7), timeZone)),
    monthResetsAt: iso(startOfLocalDate(nextMonthStart(day), timeZone)),
    dayStartMs,
    dayEndMs,
  };
}

/** Per zone, the last day asked for: every call of a day gets it without a date computed. */
const lastDay = new Map<string, LocalDay>();

/** The local day, week and month of a moment in a zone (an unknown zone throws RangeError). */
export function localDay(now: Date, timeZone: string = DEFAULT_TIME_ZONE): LocalDay {
  const ms = now.getTime();
  const known = lastDay.get(timeZone);
  if (known && ms >= known.dayStartMs && ms < known.dayEndMs) return known;
  if (!Number.isFinite(ms)) throw new RangeError('Invalid time value');
  const computed = computeLocalDay(ms, timeZone);
  if (lastDay.size >= 1_000) lastDay.clear();
  lastDay.set(timeZone, computed);
  return computed;
}

/** A period's window: its first local date, and when it ends. */
export function periodWindow(local: LocalDay, period: Period): { firstDay: string; resetsAt: string } {
  if (period === 'day') return { firstDay: local.day, resetsAt: local.dayResetsAt };
  if (period === 'week') return { firstDay: local.weekStart, resetsAt: local.weekResetsAt };
  return { firstDay: local.monthStart, resetsAt: local.monthResetsAt };
}

/** A period's window in local dates, both included, and the instant it ends (ISO 8601 UTC). */
export interface DatedWindow {
  readonly period: Period;
  readonly firstDay: string;
  readonly lastDay: string;
  readonly resetsAt: string;
}

function lastDayOf(period: Period, firstDay: string): string {
  if (period === 'day') return firstDay;
  if (period === 'week') return addDays(firstDay, 6);
  return addDays(nextMonthStart(firstDay), -1);
}

/**
 * The windows a threshold scan looks at for a period: the current one, and on its first local
 * day the one before too (a crossing in its last seconds is found after it ended). The one before
 * ends where today starts.
 */
export function scannedWindows(local: LocalDay, period: Period): DatedWindow[] {
  const current = periodWindow(local, period);
  const windows: DatedWindow[] = [
    { period, firstDay: current.firstDay, lastDay: lastDayOf(period, current.firstDay), resetsAt: current.resetsAt },
  ];
  if (local.day === current.firstDay) {
    const yesterday = addDays(local.day, -1);
    const firstDay =
      period === 'day' ? yesterday : period === 'week' ? addDays(local.weekStart, -7) : `${yesterday.slice(0, 7)}-01`;
    windows.push({ period, firstDay, lastDay: yesterday, resetsAt: iso(local.dayStartMs) });
  }
  return windows;
}
