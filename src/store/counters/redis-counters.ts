/* eslint-disable max-lines -- split of its scripts is still to do (issue #53) */
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
import { STEP_RATE_WINDOW_MS, takeSqlStepSlot, type StepSlot, type StepSlotRequest } from './step-rate.js';
import { addDays } from '../../periods.js';
import { PastSpendCache, pastOf, readsPastDays, withWindows } from './past-spend.js';
import {
  recordedSpend,
  type CounterScope,
  type CounterStore,
  type DailySpend,
  type DecisionCounters,
} from './counters.js';

const DAY_TTL_SECONDS = 2 * 24 * 3600;
/** A seal outlives by far the past spend remembered under it (PAST_MAX_AGE_MS). */
const SEAL_TTL_SECONDS = 24 * 3600;

/**
 * KEYS: a workspace's counters of one day, then its seal and its state version. ARGV: each
 * counter's total, then the day, the TTL, and 'raise' (to the larger of the two) or 'set'.
 * Where a counter changed and the day is sealed, the state version is bumped.
 */
const RAISE_TO = `
local n = #KEYS - 2
local day, ttl, mode = ARGV[n + 1], ARGV[n + 2], ARGV[n + 3]
local changed = false
for i = 1, n do
  local current = tonumber(redis.call('GET', KEYS[i]) or '-1')
  local total = tonumber(ARGV[i])
  if total > current or mode == 'set' then
    redis.call('SET', KEYS[i], ARGV[i], 'EX', ttl)
    changed = changed or total ~= current
  end
end
if changed then
  local sealed = redis.call('GET', KEYS[n + 1])
  if sealed and day <= sealed and redis.call('EXISTS', KEYS[n + 2]) == 1 then redis.call('INCR', KEYS[n + 2]) end
end
return 1`;

/**
 * KEYS: a workspace's seal and its state version. ARGV: the last day to seal (yesterday), a
 * first version where there is none, the seal's TTL. Answers the version, read once sealed.
 */
const SEAL = `
local sealed = redis.call('GET', KEYS[1])
if not sealed or sealed < ARGV[1] then sealed = ARGV[1] end
redis.call('SET', KEYS[1], sealed, 'EX', ARGV[3])
local version = redis.call('GET', KEYS[2])
if not version then
  redis.call('SET', KEYS[2], ARGV[2])
  version = ARGV[2]
end
return version`;

/**
 * KEYS: a user's window (a sorted set of step ids by time); ARGV: now (ms), the window (ms), the
 * limit, the step's id. Drops what left the window, counts, and adds the step when there is room.
 * Answers {taken (0/1), steps in the window before it, the oldest one's time (-1: none)}.
 */
const TAKE_STEP_SLOT = `
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local steps = redis.call('ZCARD', KEYS[1])
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] or '-1'
if steps < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, steps, oldest}
end
return {0, steps, oldest}`;

interface CounterCommands {
  rgRaiseTo(numberOfKeys: number, ...args: (string | number)[]): Promise<number>;
  rgSeal(numberOfKeys: number, ...args: (string | number)[]): Promise<string>;
  rgTakeStepSlot(numberOfKeys: number, ...args: (string | number)[]): Promise<[number, number, string]>;
}

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

/** Keys raised per round trip when the copy is rebuilt. */
const REBUILD_BATCH = 500;

/** Raises of one workspace's and user's keys asked for in one tick, written as one. */
interface PendingRaise {
  scope: CounterScope;
  totals: DailySpend;
  written: Promise<void>;
  resolve: () => void;
}

/** The copy's spend of today, as read; null where a key is missing. */
function copiedSpend(
  scope: CounterScope,
  ws: string | null,
  user: string | null,
  subjects: (string | null)[],
): DailySpend | null {
  if (ws === null || user === null || subjects.includes(null)) return null;
  const spend: DailySpend = { workspaceDailySpendMicros: Number(ws), userDailySpendMicros: Number(user) };
  if (scope.subjects?.length)
    spend.subjects = Object.fromEntries(scope.subjects.map((subject, i) => [subject, { day: Number(subjects[i]) }]));
  return spend;
}

export class RedisCounters implements CounterStore {
  readonly kind = 'redis';
  private readonly redis: Redis & CounterCommands;
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
    redis.defineCommand('rgRaiseTo', { lua: RAISE_TO });
    redis.defineCommand('rgSeal', { lua: SEAL });
    redis.defineCommand('rgTakeStepSlot', { lua: TAKE_STEP_SLOT });
    this.redis = redis as Redis & CounterCommands;
    // A connection that closed may come back to a Redis that restarted from an older snapshot (or
    // failed over to a replica that lagged) without any command of ours failing: its copy is not
    // read again until raised to the records, as after a failure.
    redis.on('close', () => {
      this.failures++;
      this.stale = true;
      this.past.clear();
    });
  }

  private keys(scope: Pick<CounterScope, 'workspaceId' | 'userId' | 'day'>): [string, string] {
    const tag = `{${scope.workspaceId}}`;
    return [`${tag}:spend:${scope.day}`, `${tag}:uspend:${scope.day}:${scope.userId}`];
  }

  /** Same hash tag as the workspace's spend keys, so one MGET reads them all (Cluster-safe). */
  private stateKey(workspaceId: string): string {
    return `{${workspaceId}}:state`;
  }

  /** The keys of the spend on `day` of `subjects` (key and tag budgets'), in their order. */
  private subjectKeys(workspaceId: string, day: string, subjects: readonly string[] = []): string[] {
    return subjects.map((subject) => `{${workspaceId}}:sspend:${day}:${subject}`);
  }

  /** The last local day whose spend some daemon remembers as past (`YYYY-MM-DD`). */
  private sealKey(workspaceId: string): string {
    return `{${workspaceId}}:sealed`;
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

  /**
   * Raises every key of today and yesterday (local days, so from two UTC days back) to the records. Writes are never skipped while
   * it runs (they are max-merges of committed totals), so a cost committed after its read is
   * carried by its own write.
   */
  private startRebuild(): void {
    if (this.rebuilding) return;
    const failures = this.failures;
    this.rebuilding = (async () => {
      const { rows } = await this.db.query<{
        workspace_id: string;
        user_id: string;
        day: string;
        ws: string;
        usr: string;
      }>(
        `SELECT u.workspace_id, u.user_id, u.day::text AS day, coalesce(w.spend_micros, 0) AS ws, u.spend_micros AS usr
         FROM user_usage_daily u LEFT JOIN usage_daily w ON w.workspace_id = u.workspace_id AND w.day = u.day
         WHERE u.day >= (now() AT TIME ZONE 'UTC')::date - 2`,
      );
      for (let i = 0; i < rows.length; i += REBUILD_BATCH) {
        const pipeline = this.redis.pipeline() as ReturnType<Redis['pipeline']> & {
          rgRaiseTo(numberOfKeys: number, ...args: (string | number)[]): unknown;
        };
        for (const row of rows.slice(i, i + REBUILD_BATCH)) {
          const scope = {
            workspaceId: row.workspace_id,
            userId: row.user_id,
            day: row.day,
            month: row.day.slice(0, 7),
          };
          const totals = { workspaceDailySpendMicros: Number(row.ws), userDailySpendMicros: Number(row.usr) };
          pipeline.rgRaiseTo(...this.raiseArgs(scope, totals, 'raise'));
        }
        const results = (await pipeline.exec()) ?? [];
        const error = results.find(([commandError]) => commandError)?.[0];
        if (error) throw error;
      }
      const subjects = await this.rebuildSubjects();
      if (this.failures === failures) {
        this.stale = false;
        this.log?.info(
          { keys: rows.length * 2 + subjects },
          'Redis answers again: its copy of spend was rebuilt from Postgres',
        );
      }
    })()
      .catch((error: unknown) => this.failed(error))
      .finally(() => {
        this.rebuilding = null;
      });
  }

  /**
   * Raises every subject key of today and yesterday (key and tag budgets') to the records, one
   * script call per workspace and day (its seal and version are the workspace's); answers how many.
   */
  private async rebuildSubjects(): Promise<number> {
    const { rows } = await this.db.query<{ workspace_id: string; day: string; subjects: string[]; totals: string[] }>(
      `SELECT workspace_id, day::text AS day, array_agg(subject) AS subjects, array_agg(spend_micros::text) AS totals
       FROM subject_usage_daily WHERE day >= (now() AT TIME ZONE 'UTC')::date - 2 GROUP BY workspace_id, day`,
    );
    let keys = 0;
    for (const row of rows) {
      const totals: DailySpend = {
        workspaceDailySpendMicros: 0,
        userDailySpendMicros: 0,
        subjects: Object.fromEntries(row.subjects.map((subject, i) => [subject, { day: Number(row.totals[i]) }])),
      };
      await this.redis.rgRaiseTo(...this.raiseArgs({ workspaceId: row.workspace_id, day: row.day }, totals, 'raise'));
      keys += row.subjects.length;
    }
    return keys;
  }

  async readSpend(scope: CounterScope): Promise<DailySpend> {
    return (await this.readDecisionInputs(scope)).spend;
  }

  async readDecisionInputs(scope: CounterScope): Promise<DecisionCounters> {
    if (this.stale && Date.now() >= this.bypassUntil) this.startRebuild();
    // After a failure, a change may have gone unannounced: nothing remembered is trusted (no
    // version) until Redis is known whole again.
    if (this.stale || Date.now() < this.bypassUntil) return this.fromRecords(scope);
    // Written out rather than through `guarded`: this read is every decision's, and its common
    // case (every key there, no window) awaits Redis once.
    try {
      const versionKey = this.stateKey(scope.workspaceId);
      const [ws, user] = this.keys(scope);
      // One round trip: the version and today's spend, the subjects' too (a window's past days
      // are remembered).
      const [version = null, wsSpend = null, userSpend = null, ...subjects] = await this.redis.mget(
        versionKey,
        ws,
        user,
        ...this.subjectKeys(scope.workspaceId, scope.day, scope.subjects),
      );
      // First use, or Redis lost it: a random start, so no version read before the loss recurs.
      if (version === null) await this.redis.set(versionKey, randomInt(2 ** 47), 'NX');
      const today = copiedSpend(scope, wsSpend, userSpend, subjects) ?? (await this.spendFromRecords(scope));
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
      const sealedAt = await this.redis.rgSeal(
        2,
        this.sealKey(scope.workspaceId),
        this.stateKey(scope.workspaceId),
        addDays(scope.day, -1),
        randomInt(2 ** 47),
        SEAL_TTL_SECONDS,
      );
      return { version: String(sealedAt), past: pastOf(await recordedSpend(this.db, scope)) };
    });
    return withWindows(scope, today, past);
  }

  /** Today's spend where a key of the copy is missing: the records', the copy raised to them. */
  private async spendFromRecords(scope: CounterScope): Promise<DailySpend> {
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
  spendRecorded(scope: CounterScope, totals: DailySpend): Promise<void> {
    const userKey = this.keys(scope)[1];
    const pending = this.pendingRaises.get(userKey);
    if (pending) {
      const subjects = { ...pending.totals.subjects };
      for (const [subject, spend] of Object.entries(totals.subjects ?? {}))
        subjects[subject] = { day: Math.max(subjects[subject]?.day ?? 0, spend.day) };
      pending.totals = {
        workspaceDailySpendMicros: Math.max(pending.totals.workspaceDailySpendMicros, totals.workspaceDailySpendMicros),
        userDailySpendMicros: Math.max(pending.totals.userDailySpendMicros, totals.userDailySpendMicros),
        ...(Object.keys(subjects).length > 0 && { subjects }),
      };
      return pending.written;
    }
    // After the microtasks of this tick: every result of a commit has been handed out by then.
    if (this.pendingRaises.size === 0) process.nextTick(() => this.writeRaises());
    let resolve!: () => void;
    const written = new Promise<void>((resolveWritten) => (resolve = resolveWritten));
    this.pendingRaises.set(userKey, { scope, totals, written, resolve });
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

  async resyncSpend(scope: CounterScope, totals: DailySpend): Promise<void> {
    await this.raise(scope, totals, 'set');
  }

  async stateChanged(workspaceId: string): Promise<void> {
    try {
      await this.redis.incr(this.stateKey(workspaceId));
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
    const key = `{${scope.workspaceId}}:rate:${scope.userId}`;
    return this.guarded(
      async () => {
        const [taken, steps, oldest] = await this.redis.rgTakeStepSlot(
          1,
          key,
          request.nowMs,
          STEP_RATE_WINDOW_MS,
          request.limit,
          request.stepId,
        );
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
  private async raise(scope: CounterScope, totals: DailySpend, mode: 'raise' | 'set' = 'raise'): Promise<void> {
    await this.redis.rgRaiseTo(...this.raiseArgs(scope, totals, mode));
  }

  /**
   * RAISE_TO's arguments for the scope's day: its counters (the workspace's and user's where the
   * scope names a user; the subjects' of `totals`), the workspace's seal and version.
   */
  private raiseArgs(
    scope: Pick<CounterScope, 'workspaceId' | 'day'> & { userId?: string },
    totals: DailySpend,
    mode: 'raise' | 'set',
  ): [number, ...(string | number)[]] {
    const subjects = Object.entries(totals.subjects ?? {});
    const own = scope.userId === undefined ? [] : this.keys({ ...scope, userId: scope.userId });
    const ownTotals = scope.userId === undefined ? [] : [totals.workspaceDailySpendMicros, totals.userDailySpendMicros];
    const subjectKeys = this.subjectKeys(
      scope.workspaceId,
      scope.day,
      subjects.map(([subject]) => subject),
    );
    return [
      own.length + subjectKeys.length + 2,
      ...own,
      ...subjectKeys,
      this.sealKey(scope.workspaceId),
      this.stateKey(scope.workspaceId),
      ...ownTotals,
      ...subjects.map(([, spend]) => spend.day),
      scope.day,
      DAY_TTL_SECONDS,
      mode,
    ];
  }

  async health(): Promise<void> {
    await this.redis.ping();
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
