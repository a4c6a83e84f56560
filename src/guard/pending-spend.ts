/**
 * Read-your-writes for spend within one daemon. A proxied call's result is written after its
 * answer, in a batch with others (group commit), and reaches the counters a few milliseconds
 * later (more under load). From the moment the answer is released until its cost is in the
 * counters every check reads (the records, or Redis raised to them), the cost waits here, and
 * every check of this daemon adds it to what it read.
 *
 * A check takes the entries held when it starts reading the counters and adds them to what it
 * read. An entry released while it read (its cost reached the counters meanwhile) may or may not
 * be in what was read: the check reads again (`overtaken`); after a few tries it counts the entry
 * anyway, so the only possible error is counting a cost twice (toward denying).
 */
import type { CounterScope, DailySpend, SubjectSpend, WindowSpend } from '../store/counters/counters.js';
import { SPEND_CAP_MICROS } from '../store/counters/counters.js';

interface Entry {
  userId: string;
  /** Its subjects (key and tag budgets'), as `CounterScope.subjects`. */
  subjects: readonly string[];
  /** Null while the price is being read; then the entry's `known` settles. */
  micros: number | null;
  known: Promise<void>;
}

/**
 * A workspace's day of entries, in the order they were added, and how many were released so
 * far: a check notes both when it starts reading, and while no entry has been released since,
 * the entries it holds are the first it noted, without a copy of them a check. (An array, not a
 * Set: a check's loops over it then allocate nothing; a release's search is over the few
 * results in flight.)
 */
class DayEntries {
  readonly entries: Entry[] = [];
  releases = 0;
}

const PRICED = Promise.resolve();

export class PendingSpend {
  /** By workspace and day. */
  private readonly days = new Map<string, DayEntries>();

  /**
   * Counts `cost` (microdollars, or a promise of them while the price is read) for the scope's
   * workspace and user until the function answered is called (once the counters hold it).
   */
  add(scope: CounterScope, cost: number | Promise<number>): () => void {
    const key = dayKey(scope);
    const entry: Entry = { userId: scope.userId, subjects: scope.subjects ?? [], micros: null, known: PRICED };
    if (typeof cost === 'number') entry.micros = cost;
    else
      entry.known = cost.then(
        (micros) => {
          entry.micros = micros;
        },
        () => {
          entry.micros = 0;
        },
      );
    let day = this.days.get(key);
    if (!day) this.days.set(key, (day = new DayEntries()));
    day.entries.push(entry);
    return () => {
      const at = day.entries.indexOf(entry);
      if (at === -1) return;
      day.entries.splice(at, 1);
      day.releases++;
      if (day.entries.length === 0 && this.days.get(key) === day) this.days.delete(key);
    };
  }

  /**
   * What is held for the scope now, to add to counters read from now on: `addTo(spend)`.
   * Take it before reading the counters.
   */
  held(scope: CounterScope): HeldSpend {
    const day = this.days.get(dayKey(scope));
    return day ? new HeldSpend(scope.userId, day, null) : NOTHING_HELD;
  }

  /**
   * As `held`, the entries copied: counted as they are now even once released (a read that
   * counts its entries anyway, after it was overtaken a few times, may only count one twice).
   */
  heldCopy(scope: CounterScope): HeldSpend {
    const day = this.days.get(dayKey(scope));
    return day ? new HeldSpend(scope.userId, day, day.entries.slice()) : NOTHING_HELD;
  }
}

export class HeldSpend {
  /** How many entries are held: the day's first, as it was taken (or the copy's). */
  private readonly count: number;
  private readonly releasesBefore: number;

  constructor(
    private readonly userId: string,
    private readonly day: DayEntries,
    private copy: readonly Entry[] | null,
  ) {
    this.count = copy ? copy.length : day.entries.length;
    this.releasesBefore = day.releases;
  }

  /**
   * Some cost of the day reached the counters since (one held, or one added since: either way
   * the day's first entries may no longer be those held): a read made meanwhile may hold it.
   */
  overtaken(): boolean {
    return this.day.releases !== this.releasesBefore;
  }

  /** The entries held: the copy, else (while not `overtaken`) the day's first `count`. */
  private get entries(): readonly Entry[] {
    return this.copy ?? this.day.entries;
  }

  /**
   * Settles once every cost held has its price; null when all have one already. Ask it once the
   * read is answered and not `overtaken`: while it waits, costs may be released and the day's
   * first entries change, so the entries held are copied first (one released meanwhile then
   * counts twice at worst, as a cost counted anyway does).
   */
  priced(): Promise<unknown> | null {
    let unknown: Promise<void>[] | null = null;
    const { entries } = this;
    for (let i = 0; i < this.count; i++) if (entries[i]!.micros === null) (unknown ??= []).push(entries[i]!.known);
    if (unknown === null) return null;
    this.copy ??= entries.slice(0, this.count);
    return Promise.all(unknown);
  }

  /**
   * `spend` read from the counters, plus what this daemon had released and not yet written
   * (once `priced`). Written with loops, not spreads: every decision adds it.
   */
  addTo(spend: DailySpend): DailySpend {
    if (this.count === 0) return spend;
    let workspace = 0;
    let user = 0;
    const { entries } = this;
    for (let i = 0; i < this.count; i++) {
      const entry = entries[i]!;
      workspace += entry.micros ?? 0;
      if (entry.userId === this.userId) user += entry.micros ?? 0;
    }
    const added: DailySpend = {
      workspaceDailySpendMicros: capped(spend.workspaceDailySpendMicros + workspace),
      userDailySpendMicros: capped(spend.userDailySpendMicros + user),
    };
    // Held spend is today's: it counts in the week's and the month's windows too.
    if (spend.week) added.week = windowAdded(spend.week, workspace, user);
    if (spend.month) added.month = windowAdded(spend.month, workspace, user);
    if (spend.subjects) added.subjects = this.subjectsAdded(spend.subjects);
    return added;
  }

  /** Each subject's spend with what is held for it (today's, so its windows' too). */
  private subjectsAdded(subjects: Record<string, SubjectSpend>): Record<string, SubjectSpend> {
    const added: Record<string, SubjectSpend> = {};
    for (const [subject, spend] of Object.entries(subjects)) {
      let held = 0;
      const { entries } = this;
      for (let i = 0; i < this.count; i++) if (entries[i]!.subjects.includes(subject)) held += entries[i]!.micros ?? 0;
      const total: SubjectSpend = { day: capped(spend.day + held) };
      if (spend.week !== undefined) total.week = capped(spend.week + held);
      if (spend.month !== undefined) total.month = capped(spend.month + held);
      added[subject] = total;
    }
    return added;
  }
}

const capped = (micros: number) => Math.min(micros, SPEND_CAP_MICROS);

const windowAdded = (window: WindowSpend, workspace: number, user: number): WindowSpend => ({
  workspaceMicros: capped(window.workspaceMicros + workspace),
  userMicros: capped(window.userMicros + user),
});

const NOTHING_HELD = new HeldSpend('', new DayEntries(), null);

const dayKey = (scope: CounterScope) => `${scope.workspaceId}\u0000${scope.day}`;
