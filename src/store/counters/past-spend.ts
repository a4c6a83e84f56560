/**
 * The days before today of a decision's budget windows (rule 13's weeks and months), remembered
 * by a daemon on Redis, so that a decision reads only today's keys: as many as without budgets.
 *
 * A past day's total no longer changes but for a late write (a result committed just after
 * midnight for the day before, a daemon with its clock behind, a reconcile's repair). So the
 * past is read from the records once and remembered with the workspace's state version, which
 * every such late write bumps (see `RedisCounters`, the seal): a decision uses it only while the
 * version it reads with today's keys is the one it was remembered at, on the same local day.
 */
import { SPEND_CAP_MICROS, type CounterScope, type DailySpend, type WindowSpend } from './counters.js';

/**
 * How long remembered past spend is used at most: bounds what a version bump lost with it could
 * leave stale (Redis failing, or the daemon dying, between a late write's commit and its raise).
 */
export const PAST_MAX_AGE_MS = 60_000;
const CAPACITY = 10_000;

/** The windows' spend on the days from their first day to yesterday (the subjects' `day` unused: 0). */
export type PastSpend = Pick<DailySpend, 'week' | 'month' | 'subjects'>;

interface Entry {
  version: string;
  /** The scope it was read for: its day and windows (a day turned, a window added: read again). */
  shape: string;
  storedAt: number;
  past: PastSpend;
}

/** Whether the scope has a window that began before today: only then is there a past to read. */
export function readsPastDays(scope: CounterScope): boolean {
  return (
    (scope.weekStart !== undefined && scope.weekStart < scope.day) ||
    (scope.monthStart !== undefined && scope.monthStart < scope.day)
  );
}

/** The windows' past from the records of the whole windows, today's included (one snapshot). */
export function pastOf(recorded: DailySpend): PastSpend {
  const before = (window: WindowSpend | undefined): WindowSpend | undefined =>
    window && {
      workspaceMicros: window.workspaceMicros - recorded.workspaceDailySpendMicros,
      userMicros: window.userMicros - recorded.userDailySpendMicros,
    };
  const subjects = recorded.subjects && {
    subjects: Object.fromEntries(
      Object.entries(recorded.subjects).map(([subject, spend]) => [
        subject,
        {
          day: 0,
          ...(spend.week !== undefined && { week: spend.week - spend.day }),
          ...(spend.month !== undefined && { month: spend.month - spend.day }),
        },
      ]),
    ),
  };
  return {
    ...(recorded.week && { week: before(recorded.week) }),
    ...(recorded.month && { month: before(recorded.month) }),
    ...subjects,
  };
}

/** Today's spend with the scope's windows: their past (none where a window began today) and today. */
export function withWindows(scope: CounterScope, today: DailySpend, past: PastSpend | null): DailySpend {
  const capped = (micros: number) => Math.min(micros, SPEND_CAP_MICROS);
  const window = (before: WindowSpend | undefined): WindowSpend => ({
    workspaceMicros: capped(today.workspaceDailySpendMicros + (before?.workspaceMicros ?? 0)),
    userMicros: capped(today.userDailySpendMicros + (before?.userMicros ?? 0)),
  });
  const subjects = today.subjects && {
    subjects: Object.fromEntries(
      Object.entries(today.subjects).map(([subject, spend]) => [
        subject,
        {
          day: spend.day,
          ...(scope.weekStart !== undefined && { week: capped(spend.day + (past?.subjects?.[subject]?.week ?? 0)) }),
          ...(scope.monthStart !== undefined && { month: capped(spend.day + (past?.subjects?.[subject]?.month ?? 0)) }),
        },
      ]),
    ),
  };
  return {
    ...today,
    ...(scope.weekStart !== undefined && { week: window(past?.week) }),
    ...(scope.monthStart !== undefined && { month: window(past?.month) }),
    ...subjects,
  };
}

/** Past spend as read from the records, with the state version read once its days were sealed. */
export interface PastRead {
  version: string;
  past: PastSpend;
}

/**
 * Past spend remembered per workspace and user, each with the state version it was read at. The
 * decisions that miss it together share one read.
 */
export class PastSpendCache {
  private readonly entries = new Map<string, Entry>();
  private readonly reading = new Map<string, Promise<PastRead>>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /**
   * The scope's past for a decision that read `version` with today's spend: remembered at that
   * version, or read by `read` (which seals, then reads the records). A read already under way is
   * shared only when it answers that same version: then no late write was raised between its seal
   * and the decision's read of the version, and it holds every cost that one would.
   */
  async get(scope: CounterScope, version: string | null, read: () => Promise<PastRead>): Promise<PastSpend> {
    const key = `${scope.workspaceId}\u0000${scope.userId}`;
    // The subjects read (a key's, a run's tags') are part of what was read.
    const shape = `${scope.day}/${scope.weekStart ?? ''}/${scope.monthStart ?? ''}/${[...(scope.subjects ?? [])].sort().join('\u0000')}`;
    const entry = this.entries.get(key);
    if (
      entry !== undefined &&
      version !== null &&
      entry.version === version &&
      entry.shape === shape &&
      this.now() - entry.storedAt <= PAST_MAX_AGE_MS
    )
      return entry.past;
    const flight = `${key}\u0000${shape}`;
    const shared = this.reading.get(flight);
    if (shared !== undefined) {
      const got = await shared.catch(() => undefined);
      if (got !== undefined && got.version === version) return got.past;
    }
    const own = read();
    this.reading.set(flight, own);
    try {
      const got = await own;
      this.remember(key, { version: got.version, shape, storedAt: this.now(), past: got.past });
      return got.past;
    } finally {
      if (this.reading.get(flight) === own) this.reading.delete(flight);
    }
  }

  /**
   * Forgets everything: after Redis failed or its connection closed, a version may go back (a
   * restart from an older snapshot) and meet again one that something was remembered at.
   */
  clear(): void {
    this.entries.clear();
  }

  private remember(key: string, entry: Entry): void {
    this.entries.delete(key);
    if (this.entries.size >= CAPACITY) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, entry);
  }
}
