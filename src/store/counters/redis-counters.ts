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
 */
import { randomInt } from 'node:crypto';
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import type { Db, Queryable } from '../db.js';
import { STEP_RATE_WINDOW_MS, takeSqlStepSlot, type StepSlot, type StepSlotRequest } from './step-rate.js';
import { addDays, datesFrom } from '../../periods.js';
import {
  pastDaysFromRecords,
  recordedSpend,
  SPEND_CAP_MICROS,
  type WindowSpend,
  type CounterScope,
  type CounterStore,
  type DailySpend,
  type DecisionCounters,
} from './counters.js';

const DAY_TTL_SECONDS = 2 * 24 * 3600;
/**
 * The keys of days before today, read for the budgets of a week or a month (rule 13): kept past
 * the longest month. Their totals no longer change (a result counts on the day it is written).
 */
const PAST_DAY_TTL_SECONDS = 35 * 24 * 3600;

/** KEYS: counters; ARGV: their totals, then the TTL. Sets each key to max(current, total). */
const RAISE_TO = `
local ttl = ARGV[#ARGV]
for i, key in ipairs(KEYS) do
  local current = tonumber(redis.call('GET', key) or '-1')
  if tonumber(ARGV[i]) > current then redis.call('SET', key, ARGV[i], 'EX', ttl) end
end
return 1`;

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
  keys: [string, string];
  totals: DailySpend;
  written: Promise<void>;
  resolve: () => void;
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

  constructor(
    redis: Redis,
    private readonly db: Db,
    private readonly log?: Logger,
    private readonly retryAfterMs = 1_000,
  ) {
    redis.defineCommand('rgRaiseTo', { lua: RAISE_TO });
    redis.defineCommand('rgTakeStepSlot', { lua: TAKE_STEP_SLOT });
    this.redis = redis as Redis & CounterCommands;
    // A connection that closed may come back to a Redis that restarted from an older snapshot (or
    // failed over to a replica that lagged) without any command of ours failing: its copy is not
    // read again until raised to the records, as after a failure.
    redis.on('close', () => {
      this.failures++;
      this.stale = true;
    });
  }

  private keys(scope: CounterScope): [string, string] {
    const tag = `{${scope.workspaceId}}`;
    return [`${tag}:spend:${scope.day}`, `${tag}:uspend:${scope.day}:${scope.userId}`];
  }

  /** Same hash tag as the workspace's spend keys, so one MGET reads them all (Cluster-safe). */
  private stateKey(workspaceId: string): string {
    return `{${workspaceId}}:state`;
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
          const keys = this.keys({
            workspaceId: row.workspace_id,
            userId: row.user_id,
            day: row.day,
            month: row.day.slice(0, 7),
          });
          pipeline.rgRaiseTo(2, ...keys, row.ws, row.usr, DAY_TTL_SECONDS);
        }
        const results = (await pipeline.exec()) ?? [];
        const error = results.find(([commandError]) => commandError)?.[0];
        if (error) throw error;
      }
      if (this.failures === failures) {
        this.stale = false;
        this.log?.info({ keys: rows.length * 2 }, 'Redis answers again: its copy of spend was rebuilt from Postgres');
      }
    })()
      .catch((error: unknown) => this.failed(error))
      .finally(() => {
        this.rebuilding = null;
      });
  }

  readSpend(scope: CounterScope): Promise<DailySpend> {
    if (this.stale && Date.now() >= this.bypassUntil) {
      this.startRebuild();
      return recordedSpend(this.db, scope);
    }
    return this.guarded(
      async () => {
        const keys = this.keys(scope);
        const past = this.pastKeys(scope);
        const [ws = null, user = null, ...pastValues] = await this.redis.mget(...keys, ...past.keys);
        return this.windowsOf(scope, past, pastValues, await this.spendOf(keys, ws, user, scope));
      },
      () => recordedSpend(this.db, scope),
    );
  }

  /**
   * The keys of the days before today in the scope's windows (a week's or a month's budget):
   * the workspace's, then the user's, day by day from the earliest window's first day.
   */
  private pastKeys(scope: CounterScope): { days: string[]; keys: string[] } {
    const first = [scope.weekStart, scope.monthStart].filter((day): day is string => day !== undefined).sort()[0];
    if (first === undefined || first >= scope.day) return { days: [], keys: [] };
    const days = datesFrom(first, addDays(scope.day, -1));
    const tag = `{${scope.workspaceId}}`;
    return {
      days,
      keys: [...days.map((day) => `${tag}:spend:${day}`), ...days.map((day) => `${tag}:uspend:${day}:${scope.userId}`)],
    };
  }

  /**
   * Today's spend with the scope's windows added: each past day from its key, and where a key is
   * missing (never written, expired, flushed) all of them from the records, kept for next time.
   */
  private async windowsOf(
    scope: CounterScope,
    past: { days: string[]; keys: string[] },
    values: (string | null)[],
    today: DailySpend,
  ): Promise<DailySpend> {
    if (scope.weekStart === undefined && scope.monthStart === undefined) return today;
    let perDay = values.map((value) => (value === null ? null : Number(value)));
    if (perDay.some((value) => value === null)) {
      perDay = await pastDaysFromRecords(this.db, scope, past.days);
      // Raised, never set: a result of a day just ended may have raised its key meanwhile.
      await this.redis.rgRaiseTo(past.keys.length, ...past.keys, ...perDay.map(Number), PAST_DAY_TTL_SECONDS);
    }
    const n = past.days.length;
    const since = (first: string): WindowSpend => {
      let workspaceMicros = today.workspaceDailySpendMicros;
      let userMicros = today.userDailySpendMicros;
      past.days.forEach((day, i) => {
        if (day < first) return;
        workspaceMicros += perDay[i]!;
        userMicros += perDay[n + i]!;
      });
      return {
        workspaceMicros: Math.min(workspaceMicros, SPEND_CAP_MICROS),
        userMicros: Math.min(userMicros, SPEND_CAP_MICROS),
      };
    };
    return {
      ...today,
      ...(scope.weekStart !== undefined && { week: since(scope.weekStart) }),
      ...(scope.monthStart !== undefined && { month: since(scope.monthStart) }),
    };
  }

  async readDecisionInputs(scope: CounterScope): Promise<DecisionCounters> {
    // After a failure, a change may have gone unannounced: nothing remembered is trusted (no
    // version) until Redis is known whole again.
    const fromRecords = async (): Promise<DecisionCounters> => ({
      spend: await recordedSpend(this.db, scope),
      stateVersion: null,
    });
    if (this.stale && Date.now() >= this.bypassUntil) {
      this.startRebuild();
      return fromRecords();
    }
    return this.guarded(async () => {
      const keys = this.keys(scope);
      const versionKey = this.stateKey(scope.workspaceId);
      const past = this.pastKeys(scope);
      // One round trip: the version, today's spend and the windows' past days.
      const [version = null, ws = null, user = null, ...pastValues] = await this.redis.mget(
        versionKey,
        ...keys,
        ...past.keys,
      );
      // First use, or Redis lost it: a random start, so no version read before the loss recurs.
      if (version === null) await this.redis.set(versionKey, randomInt(2 ** 47), 'NX');
      const today = await this.spendOf(keys, ws, user, scope);
      return { spend: await this.windowsOf(scope, past, pastValues, today), stateVersion: version };
    }, fromRecords);
  }

  /** The copy's spend; where a key is missing, the records' (and the copy raised to them). */
  private async spendOf(
    keys: [string, string],
    ws: string | null,
    user: string | null,
    scope: CounterScope,
  ): Promise<DailySpend> {
    if (ws !== null && user !== null)
      return { workspaceDailySpendMicros: Number(ws), userDailySpendMicros: Number(user) };
    const truth = await recordedSpend(this.db, { ...scope, weekStart: undefined, monthStart: undefined });
    await this.raise(keys, truth);
    return truth;
  }

  /**
   * A raise takes each key to the larger of its value and the total, so the raises of one pair of
   * keys asked for in one tick (the results of one shared commit, steps of one run) are one raise
   * to the largest totals: one script call where there were as many as results. Each caller still
   * resolves only once its totals are in Redis.
   */
  spendRecorded(scope: CounterScope, totals: DailySpend): Promise<void> {
    const keys = this.keys(scope);
    const pending = this.pendingRaises.get(keys[1]);
    if (pending) {
      pending.totals = {
        workspaceDailySpendMicros: Math.max(pending.totals.workspaceDailySpendMicros, totals.workspaceDailySpendMicros),
        userDailySpendMicros: Math.max(pending.totals.userDailySpendMicros, totals.userDailySpendMicros),
      };
      return pending.written;
    }
    // After the microtasks of this tick: every result of a commit has been handed out by then.
    if (this.pendingRaises.size === 0) process.nextTick(() => this.writeRaises());
    let resolve!: () => void;
    const written = new Promise<void>((resolveWritten) => (resolve = resolveWritten));
    this.pendingRaises.set(keys[1], { keys, totals, written, resolve });
    return written;
  }

  private writeRaises(): void {
    const raises = [...this.pendingRaises.values()];
    this.pendingRaises.clear();
    for (const { keys, totals, resolve } of raises) {
      // Nothing to fall back to: the records hold it, and the next write or rebuild carries it.
      void this.guarded(
        () => this.raise(keys, totals),
        async () => {},
      ).then(resolve);
    }
  }

  async resyncSpend(scope: CounterScope, totals: DailySpend): Promise<void> {
    const [ws, user] = this.keys(scope);
    await this.redis
      .multi()
      .set(ws, totals.workspaceDailySpendMicros, 'EX', DAY_TTL_SECONDS)
      .set(user, totals.userDailySpendMicros, 'EX', DAY_TTL_SECONDS)
      .exec();
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

  private async raise(keys: [string, string], totals: DailySpend): Promise<void> {
    await this.redis.rgRaiseTo(
      2,
      ...keys,
      totals.workspaceDailySpendMicros,
      totals.userDailySpendMicros,
      DAY_TTL_SECONDS,
    );
  }

  async health(): Promise<void> {
    await this.redis.ping();
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
