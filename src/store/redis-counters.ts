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
 * so) and Redis is tried again after a pause.
 */
import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from 'pino';
import type { Db } from './db.js';
import { recordedSpend, type CounterScope, type CounterStore, type DailySpend } from './counters.js';

const DAY_TTL_SECONDS = 2 * 24 * 3600;

/** KEYS: counters; ARGV: their totals, then the TTL. Sets each key to max(current, total). */
const RAISE_TO = `
local ttl = ARGV[#ARGV]
for i, key in ipairs(KEYS) do
  local current = tonumber(redis.call('GET', key) or '-1')
  if tonumber(ARGV[i]) > current then redis.call('SET', key, ARGV[i], 'EX', ttl) end
end
return 1`;

interface CounterCommands {
  rgRaiseTo(numberOfKeys: number, ...args: (string | number)[]): Promise<number>;
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
  };
  return new Redis(options.url, redisOptions);
}

export class RedisCounters implements CounterStore {
  readonly kind = 'redis';
  private readonly redis: Redis & CounterCommands;
  /** While set, Redis failed recently: read the records until then. */
  private bypassUntil = 0;

  constructor(
    redis: Redis,
    private readonly db: Db,
    private readonly log?: Logger,
    private readonly retryAfterMs = 1_000,
  ) {
    redis.defineCommand('rgRaiseTo', { lua: RAISE_TO });
    this.redis = redis as Redis & CounterCommands;
  }

  private keys(scope: CounterScope): [string, string] {
    const tag = `{${scope.workspaceId}}`;
    return [`${tag}:spend:${scope.day}`, `${tag}:uspend:${scope.day}:${scope.userId}`];
  }

  /** Runs `op` on Redis unless it failed recently; on failure, `fallback`. */
  private async guarded<T>(op: () => Promise<T>, fallback: () => Promise<T>): Promise<T> {
    if (Date.now() < this.bypassUntil) return fallback();
    try {
      return await op();
    } catch (error) {
      this.bypassUntil = Date.now() + this.retryAfterMs;
      this.log?.warn({ err: error }, 'Redis unavailable: decisions read spend from Postgres until it answers again');
      return fallback();
    }
  }

  readSpend(scope: CounterScope): Promise<DailySpend> {
    const keys = this.keys(scope);
    return this.guarded(
      async () => {
        const [ws, user] = await this.redis.mget(...keys);
        if (ws !== null && user !== null) return { workspaceDailySpendMicros: Number(ws), userDailySpendMicros: Number(user) };
        const truth = await recordedSpend(this.db, scope);
        await this.raise(keys, truth);
        return truth;
      },
      () => recordedSpend(this.db, scope),
    );
  }

  async spendRecorded(scope: CounterScope, totals: DailySpend): Promise<void> {
    // Nothing to fall back to: the records hold it, and the next write or rebuild carries it.
    await this.guarded(() => this.raise(this.keys(scope), totals), async () => {});
  }

  async resyncSpend(scope: CounterScope, totals: DailySpend): Promise<void> {
    const [ws, user] = this.keys(scope);
    await this.redis
      .multi()
      .set(ws, totals.workspaceDailySpendMicros, 'EX', DAY_TTL_SECONDS)
      .set(user, totals.userDailySpendMicros, 'EX', DAY_TTL_SECONDS)
      .exec();
  }

  private async raise(keys: [string, string], totals: DailySpend): Promise<void> {
    await this.redis.rgRaiseTo(2, ...keys, totals.workspaceDailySpendMicros, totals.userDailySpendMicros, DAY_TTL_SECONDS);
  }

  async health(): Promise<void> {
    await this.redis.ping();
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
