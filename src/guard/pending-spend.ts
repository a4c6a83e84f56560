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

  /** `spend` read from the counters, plus what this daemon had released and not yet written. */
  async addTo(spend: DailySpend): Promise<DailySpend> {
    if (this.entries.length === 0) return spend;
    const unknown = this.entries.filter((entry) => entry.micros === null).map((entry) => entry.known);
    if (unknown.length) await Promise.all(unknown);
    let workspace = 0;
    let user = 0;
    for (const entry of this.entries) {
      workspace += entry.micros ?? 0;
      if (entry.userId === this.userId) user += entry.micros ?? 0;
    }
    const capped = (micros: number) => Math.min(micros, SPEND_CAP_MICROS);
    // Held spend is today's: it counts in the week's and the month's windows too.
    const windowed = (window: WindowSpend | undefined) =>
      window && {
        workspaceMicros: capped(window.workspaceMicros + workspace),
        userMicros: capped(window.userMicros + user),
      };
    return {
      workspaceDailySpendMicros: capped(spend.workspaceDailySpendMicros + workspace),
      userDailySpendMicros: capped(spend.userDailySpendMicros + user),
      ...(spend.week && { week: windowed(spend.week) }),
      ...(spend.month && { month: windowed(spend.month) }),
      ...(spend.subjects && { subjects: this.subjectsAdded(spend.subjects) }),
    };
  }

  /** Each subject's spend with what is held for it (today's, so its windows' too). */
  private subjectsAdded(subjects: Record<string, SubjectSpend>): Record<string, SubjectSpend> {
    const capped = (micros: number) => Math.min(micros, SPEND_CAP_MICROS);
    return Object.fromEntries(
      Object.entries(subjects).map(([subject, spend]) => {
        let held = 0;
        for (const entry of this.entries) if (entry.subjects.includes(subject)) held += entry.micros ?? 0;
        return [
          subject,
          {
            day: capped(spend.day + held),
            ...(spend.week !== undefined && { week: capped(spend.week + held) }),
            ...(spend.month !== undefined && { month: capped(spend.month + held) }),
          },
        ];
      }),
    );
  }
}

const NOTHING_HELD = new HeldSpend('', []);

const dayKey = (scope: CounterScope) => `${scope.workspaceId}\u0000${scope.day}`;
