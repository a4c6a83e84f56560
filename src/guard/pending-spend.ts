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
  /** The counters hold it now. */
  released: boolean;
  /** Null while the price is being read; then the entry's `known` settles. */
  micros: number | null;
  known: Promise<void>;
}

export class PendingSpend {
  /** By workspace and day. */
  private readonly entries = new Map<string, Set<Entry>>();

  /**
   * Counts `cost` (microdollars, or a promise of them while the price is read) for the scope's
   * workspace and user until the function answered is called (once the counters hold it).
   */
  add(scope: CounterScope, cost: number | Promise<number>): () => void {
    const key = dayKey(scope);
    const entry: Entry = {
      userId: scope.userId,
      subjects: scope.subjects ?? [],
      released: false,
      micros: null,
      known: Promise.resolve(),
    };
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
    let set = this.entries.get(key);
    if (!set) this.entries.set(key, (set = new Set()));
    set.add(entry);
    return () => {
      entry.released = true;
      set.delete(entry);
      if (set.size === 0 && this.entries.get(key) === set) this.entries.delete(key);
    };
  }

  /**
   * What is held for the scope now, to add to counters read from now on: `addTo(spend)`.
   * Take it before reading the counters.
   */
  held(scope: CounterScope): HeldSpend {
    const set = this.entries.get(dayKey(scope));
    return set ? new HeldSpend(scope.userId, [...set]) : NOTHING_HELD;
  }
}

export class HeldSpend {
  constructor(
    private readonly userId: string,
    private readonly entries: readonly Entry[],
  ) {}

  /** Some cost held reached the counters since: a read made meanwhile may hold it already. */
  overtaken(): boolean {
    return this.entries.some((entry) => entry.released);
  }

  /** Settles once every cost held has its price; null when all have one already. */
  priced(): Promise<unknown> | null {
    let unknown: Promise<void>[] | null = null;
    for (const entry of this.entries) if (entry.micros === null) (unknown ??= []).push(entry.known);
    return unknown && Promise.all(unknown);
  }

  /**
   * `spend` read from the counters, plus what this daemon had released and not yet written
   * (once `priced`). Written with loops, not spreads: every decision adds it.
   */
  addTo(spend: DailySpend): DailySpend {
    if (this.entries.length === 0) return spend;
    let workspace = 0;
    let user = 0;
    for (const entry of this.entries) {
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
      for (const entry of this.entries) if (entry.subjects.includes(subject)) held += entry.micros ?? 0;
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

const NOTHING_HELD = new HeldSpend('', []);

const dayKey = (scope: CounterScope) => `${scope.workspaceId}\u0000${scope.day}`;
