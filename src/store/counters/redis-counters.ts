/**
 * The counter store on Redis: a copy of the day's spend shared by every daemon, read on every
 * decision without touching Postgres. Keys are hash-tagged by workspace and expire.
 *
 * Each write sets a key to the larger of its value and the total the records reported right
 * after the write committed. Totals only grow within a day, so the copy never counts a cost
 * twice, a lost write is covered by the next one, and a missing key (Redis restarted, flushed,
 * expired) is rebuilt from Postgres the same way.
 *
 * When Redis fails, decisions read the records instead (a warning in the log, and /health says
 * so) and Redis is tried again after a pause. Writes skipped meanwhile are missing from keys that
 * survived the outage (a network cut, a timeout), and a Redis that restarted from a snapshot holds
 * older values: after a failure, or once the connection closed, every key of today and yesterday
 * is raised to the records before the copy is read again, while decisions read the records.
 *
 * The days before today of a budget's week or month are not read from Redis: they are read from
 * the records once and remembered (past-spend.ts) with the workspace's state version. A daemon
 * about to read them first *seals* the days up to yesterday in Redis; a raise or set of a sealed
 * day's key (a late write, a rebuild, a reconcile) then bumps the state version in the same
 * script, so every daemon reads the past again at its next decision, whatever its clock says.
 */
import { randomInt } from 'node:crypto';
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import type { Db, Queryable } from '../db.js';
import { takeSqlStepSlot, type StepSlot, type StepSlotRequest } from './step-rate.js';
import { spendKeys, stateKey, stepRateKey, subjectKeys, userSpendKey, workspaceSpendKey } from './redis-keys.js';
import { raiseCopyToRecords } from './redis-rebuild.js';
import { raiseArgs, sealArgs, stepSlotArgs, withCounterScripts, type CounterScripts } from './redis-scripts.js';
import { addDays } from '../../periods.js';
import { PastSpendCache, pastOf, readsPastDays, withWindows } from './past-spend.js';
import {
  recordedSpend,
  type CounterScope,
  type CounterStore,
  type DailySpend,
  type DecisionCounters,
  type SpendScope,
  type SubjectSpend,
  type WorkspaceScope,
} from './counters.js';

export interface RedisCountersOptions {
  url: string;
  /** Prepended to every key; lets tests share one Redis. */
  keyPrefix?: string;
  commandTimeoutMs?: number;
}

export function redisClient(options: RedisCountersOptions): Redis {
  const redisOptions: RedisOptions = {
    keyPrefix: options.keyPrefix ?? 'rg:',
    // Fail fast rather than queue: a decision waits for no Redis that is not there.
    commandTimeout: options.commandTimeoutMs ?? 1_000,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    lazyConnect: true,
    // Commands issued in one tick (the reads and raises of calls decided together) share a write.
    enableAutoPipelining: true,
  };
  return new Redis(options.url, redisOptions);
}

/** Raises of one workspace's and user's keys asked for in one tick, written as one. */
interface PendingRaise {
  scope: CounterScope;
  /** The first caller's totals until a second raise comes; from then a copy of this raise's own. */
  totals: DailySpend;
  merged: boolean;
  written: Promise<void>;
  resolve: () => void;
}

/**
 * Takes a pending raise's totals to the larger of theirs and `totals`, in place once they are the
 * raise's own copy: the results of one shared commit (tens of them under load) each merge theirs.
 */
function raiseTotals(pending: PendingRaise, totals: DailySpend): void {
  if (!pending.merged) {
    const first = pending.totals;
    pending.totals = {
      workspaceDailySpendMicros: first.workspaceDailySpendMicros,
      userDailySpendMicros: first.userDailySpendMicros,
    };
    if (first.subjects) pending.totals.subjects = { ...first.subjects };
    pending.merged = true;
  }
  const own = pending.totals;
  own.workspaceDailySpendMicros = Math.max(own.workspaceDailySpendMicros, totals.workspaceDailySpendMicros);
  own.userDailySpendMicros = Math.max(own.userDailySpendMicros, totals.userDailySpendMicros);
  if (!totals.subjects) return;
  const subjects = (own.subjects ??= {});
  for (const subject in totals.subjects) {
    const day = totals.subjects[subject]!.day;
    const held = subjects[subject]?.day ?? 0;
    if (day > held || subjects[subject] === undefined) subjects[subject] = { day: Math.max(held, day) };
  }
}

/**
 * The copy's spend of today, as read; null where a key is missing. The subjects' values are
 * `values` from `subjectsAt` on, in the scope's order.
 */
function copiedSpend(
  scope: SpendScope,
  ws: string | null | undefined,
  user: string | null | undefined,
  values: readonly (string | null)[],
  subjectsAt: number,
): DailySpend | null {
  if (ws === null || ws === undefined || user === null || user === undefined) return null;
  const spend: DailySpend = { workspaceDailySpendMicros: Number(ws), userDailySpendMicros: Number(user) };
  if (!scope.subjects?.length) return spend;
  const subjects: Record<string, SubjectSpend> = {};
  for (let i = 0; i < scope.subjects.length; i++) {
    const value = values[subjectsAt + i];
    if (value === null || value === undefined) return null;
    subjects[scope.subjects[i]!] = { day: Number(value) };
  }
  spend.subjects = subjects;
  return spend;
}

export class RedisCounters implements CounterStore {
  readonly kind = 'redis';
  private readonly redis: Redis & CounterScripts;
  /** While set, Redis failed recently: read the records until then. */
  private bypassUntil = 0;
  /** Counts failures; a rebuild that saw another failure start after it began proves nothing. */
  private failures = 0;
  /** A write may have been lost since the copy was last known whole: it is not read until rebuilt. */
  private stale = false;
  private rebuilding: Promise<void> | null = null;
  /** By user key (which names the workspace, the day and the user). */
  private readonly pendingRaises = new Map<string, PendingRaise>();
  /** The past days of budget windows, read from the records (see the seal). */
  private readonly past = new PastSpendCache();

  constructor(
    redis: Redis,
    private readonly db: Db,
    private readonly log?: Logger,
    private readonly retryAfterMs = 1_000,
  ) {
    this.redis = withCounterScripts(redis);
    // A connection that closed may come back to a Redis that restarted from an older snapshot (or
    // failed over to a replica that lagged) without any command of ours failing: its copy is not
    // read again until raised to the records, as after a failure.
    redis.on('close', () => {
      this.failures++;
      this.stale = true;
      this.past.clear();
    });
  }

  /** Runs `op` on Redis unless it failed recently; on failure, `fallback`. */
  private async guarded<T>(op: () => Promise<T>, fallback: () => Promise<T>): Promise<T> {
    if (Date.now() < this.bypassUntil) return fallback();
    try {
      return await op();
    } catch (error) {
      this.failed(error);
      return fallback();
    }
  }

  private failed(error: unknown): void {
    this.bypassUntil = Date.now() + this.retryAfterMs;
    this.failures++;
    this.stale = true;
    this.past.clear();
    this.log?.warn({ err: error }, 'Redis unavailable: decisions read spend from Postgres until it answers again');
  }

  /** Raises the copy to the records (redis-rebuild.ts); it is read again once that succeeded with no failure since. */
  private startRebuild(): void {
    if (this.rebuilding) return;
    const failures = this.failures;
    this.rebuilding = raiseCopyToRecords(this.db, this.redis)
      .then((keys) => {
        if (this.failures !== failures) return;
        this.stale = false;
        this.log?.info({ keys }, 'Redis answers again: its copy of spend was rebuilt from Postgres');
      })
      .catch((error: unknown) => this.failed(error))
      .finally(() => {
        this.rebuilding = null;
      });
  }

  async readSpend(scope: SpendScope): Promise<DailySpend> {
    if (scope.userId === undefined) return this.readWorkspaceSpend(scope);
    return (await this.readDecisionInputs(scope)).spend;
  }

  /**
   * A scope with no user: the workspace's key and its subjects', or where one is missing (or a
   * window is asked for), the records.
   */
  private async readWorkspaceSpend(scope: WorkspaceScope): Promise<DailySpend> {
    const fromRecords = () => recordedSpend(this.db, scope);
    if (this.stale || scope.weekStart !== undefined || scope.monthStart !== undefined) return fromRecords();
    return this.guarded(async () => {
      const values = await this.redis.mget(
        workspaceSpendKey(scope),
        ...subjectKeys(scope.workspaceId, scope.day, scope.subjects),
      );
      return copiedSpend(scope, values[0], '0', values, 1) ?? (await this.spendFromRecords(scope));
    }, fromRecords);
  }

  readDecisionInputs(scope: CounterScope): Promise<DecisionCounters> {
    if (this.stale && Date.now() >= this.bypassUntil) this.startRebuild();
    // After a failure, a change may have gone unannounced: nothing remembered is trusted (no
    // version) until Redis is known whole again.
    if (this.stale || Date.now() < this.bypassUntil) return this.fromRecords(scope);
    // Chained, not async: this read is every decision's, and its common case (every key there,
    // no window) is one round trip and one callback.
    const versionKey = stateKey(scope.workspaceId);
    const [ws, user] = spendKeys(scope);
    // One round trip: the version and today's spend, the subjects' too (a window's past days
    // are remembered).
    const read = scope.subjects?.length
      ? this.redis.mget(versionKey, ws, user, ...subjectKeys(scope.workspaceId, scope.day, scope.subjects))
      : this.redis.mget(versionKey, ws, user);
    return read.then(
      (values) => {
        const version = values[0] ?? null;
        const today = copiedSpend(scope, values[1], values[2], values, 3);
        if (version !== null && today !== null && scope.weekStart === undefined && scope.monthStart === undefined)
          return { spend: today, stateVersion: version };
        return this.completeDecisionInputs(scope, versionKey, version, today);
      },
      (error: unknown) => {
        this.failed(error);
        return this.fromRecords(scope);
      },
    );
  }

  /** The read's less common cases: no version yet, a missing key, a window to add. */
  private async completeDecisionInputs(
    scope: CounterScope,
    versionKey: string,
    version: string | null,
    copied: DailySpend | null,
  ): Promise<DecisionCounters> {
    try {
      // First use, or Redis lost it: a random start, so no version read before the loss recurs.
      if (version === null) await this.redis.set(versionKey, randomInt(2 ** 47), 'NX');
      const today = copied ?? (await this.spendFromRecords(scope));
      const spend =
        scope.weekStart === undefined && scope.monthStart === undefined
          ? today
          : await this.windowsOf(scope, version, today);
      return { spend, stateVersion: version };
    } catch (error) {
      this.failed(error);
      return this.fromRecords(scope);
    }
  }

  private async fromRecords(scope: CounterScope): Promise<DecisionCounters> {
    return { spend: await recordedSpend(this.db, scope), stateVersion: null };
  }

  /**
   * Today's spend with the scope's windows added: their past days as remembered at `version`, or
   * else read from the records once the days up to yesterday are sealed. A late write committed
   * after that read raises a sealed day's key, which bumps the version the past is kept with.
   */
  private async windowsOf(scope: CounterScope, version: string | null, today: DailySpend): Promise<DailySpend> {
    if (!readsPastDays(scope)) return withWindows(scope, today, null);
    const past = await this.past.get(scope, version, async () => {
      const sealedAt = await this.redis.rgSeal(...sealArgs(scope.workspaceId, addDays(scope.day, -1)));
      return { version: String(sealedAt), past: pastOf(await recordedSpend(this.db, scope)) };
    });
    return withWindows(scope, today, past);
  }

  /** Today's spend where a key of the copy is missing: the records', the copy raised to them. */
  private async spendFromRecords(scope: SpendScope): Promise<DailySpend> {
    const truth = await recordedSpend(this.db, { ...scope, weekStart: undefined, monthStart: undefined });
    await this.raise(scope, truth);
    return truth;
  }

  /**
   * A raise takes each key to the larger of its value and the total, so the raises of one pair of
   * keys asked for in one tick (the results of one shared commit, steps of one run) are one raise
   * to the largest totals: one script call where there were as many as results. Each caller still
   * resolves only once its totals are in Redis.
   */
  spendRecorded(scope: SpendScope, totals: DailySpend): Promise<void> {
    // A scope with no user (the reconcile's): raised at once, apart from the hot path's raises.
    if (scope.userId === undefined)
      return this.guarded(
        () => this.raise(scope, totals),
        async () => {},
      );
    const userKey = userSpendKey(scope);
    const pending = this.pendingRaises.get(userKey);
    if (pending) {
      raiseTotals(pending, totals);
      return pending.written;
    }
    // After the microtasks of this tick: every result of a commit has been handed out by then.
    if (this.pendingRaises.size === 0) process.nextTick(() => this.writeRaises());
    let resolve!: () => void;
    const written = new Promise<void>((resolveWritten) => (resolve = resolveWritten));
    this.pendingRaises.set(userKey, { scope, totals, merged: false, written, resolve });
    return written;
  }

  private writeRaises(): void {
    const raises = [...this.pendingRaises.values()];
    this.pendingRaises.clear();
    for (const { scope, totals, resolve } of raises) {
      // Nothing to fall back to: the records hold it, and the next write or rebuild carries it.
      void this.guarded(
        () => this.raise(scope, totals),
        async () => {},
      ).then(resolve);
    }
  }

  async resyncSpend(scope: SpendScope, totals: DailySpend): Promise<void> {
    await this.raise(scope, totals, 'set');
  }

  async stateChanged(workspaceId: string): Promise<void> {
    try {
      await this.redis.incr(stateKey(workspaceId));
    } catch (error) {
      // Other daemons may go on with what they remember, for at most the cache's age limit.
      this.failed(error);
    }
  }

  /**
   * The window in Redis, one script call; while Redis fails, the database's window (exact among
   * the daemons that fall back with this one, not with those still on Redis).
   */
  takeStepSlot(tx: Queryable, scope: CounterScope, request: StepSlotRequest): Promise<StepSlot> {
    const key = stepRateKey(scope.workspaceId, scope.userId);
    return this.guarded(
      async () => {
        const [taken, steps, oldest] = await this.redis.rgTakeStepSlot(...stepSlotArgs(key, request));
        let released = false;
        return {
          stepsInWindow: Number(steps),
          taken: Number(taken) === 1,
          oldestAtMs: Number(oldest) < 0 ? null : Number(oldest),
          release: async () => {
            if (released || Number(taken) !== 1) return;
            released = true;
            await this.redis.zrem(key, request.stepId).catch((error: unknown) => this.failed(error));
          },
        };
      },
      () => takeSqlStepSlot(tx, scope, request),
    );
  }

  /** Raises (or sets) the scope's day keys to `totals`: one script call. */
  private async raise(scope: SpendScope, totals: DailySpend, mode: 'raise' | 'set' = 'raise'): Promise<void> {
    await this.redis.rgRaiseTo(...raiseArgs(scope, totals, mode));
  }

  async health(): Promise<void> {
    await this.redis.ping();
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
