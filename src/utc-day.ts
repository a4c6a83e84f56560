/**
 * A moment's UTC day and month, as the counters key them and the rules explain their resets.
 * Every call needs them, several times, and they change once a day: the day's are kept, so a call
 * makes no Date, ISO string or slice for them. A pure function's memo: whoever asks for the same
 * day gets the same answer.
 */
export interface UtcDay {
  /** `YYYY-MM-DD`. */
  readonly day: string;
  /** `YYYY-MM`. */
  readonly month: string;
  /** The next day's start, `YYYY-MM-DDT00:00:00Z`: a daily budget's reset. */
  readonly dayResetsAt: string;
  /** The next month's start: the monthly run limit's reset. */
  readonly monthResetsAt: string;
}

const DAY_MS = 86_400_000;

let last: { dayNumber: number; utc: UtcDay } | null = null;

export function utcDay(now: Date): UtcDay {
  const dayNumber = Math.floor(now.getTime() / DAY_MS);
  if (last?.dayNumber === dayNumber) return last.utc;
  const year = now.getUTCFullYear();
  const month = now.getUTCMonth();
  const iso = now.toISOString();
  const utc: UtcDay = {
    day: iso.slice(0, 10),
    month: iso.slice(0, 7),
    dayResetsAt: new Date(Date.UTC(year, month, now.getUTCDate() + 1)).toISOString().replace('.000Z', 'Z'),
    monthResetsAt: new Date(Date.UTC(year, month + 1, 1)).toISOString().replace('.000Z', 'Z'),
  };
  // An invalid Date (NaN) is answered, never kept.
  if (Number.isFinite(dayNumber)) last = { dayNumber, utc };
  return utc;
}
