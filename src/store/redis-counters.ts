/**
 * The counter store on Redis: an atomic copy of the durable counters, shared by every daemon.
 * Keys are hash-tagged by workspace (one Cluster slot per workspace); day and month keys expire.
 * A script never creates a missing key from zero: it reports it, and the key is rebuilt from
 * Postgres, so a restarted or flushed Redis loses nothing.
 */
import { Redis, type RedisOptions } from 'ioredis';
import type { Queryable } from './db.js';
import type { Admission, CounterScope, Counters, CounterStore, RunLimits } from './counters.js';
import type { SqlCounters } from './sql-counters.js';

const DAY_TTL_SECONDS = 3 * 24 * 3600;
const MONTH_TTL_SECONDS = 35 * 24 * 3600;

/** KEYS: monthly, running. ARGV: monthly limit, concurrent limit (-1 = none). */
const ADMIT = `
local m = redis.call('GET', KEYS[1])
local c = redis.call('GET', KEYS[2])
if not m or not c then return {-1, 0, 0} end
m = tonumber(m)
c = tonumber(c)
local ml = tonumber(ARGV[1])
local cl = tonumber(ARGV[2])
if (ml >= 0 and m >= ml) or (cl >= 0 and c >= cl) then return {0, m, c} end
redis.call('INCR', KEYS[1])
redis.call('INCR', KEYS[2])
return {1, m + 1, c + 1}`;

/** Adds ARGV[i] to KEYS[i] where the key exists; a missing key is rebuilt from Postgres later. */
const ADD_IF_PRESENT = `
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    local v = redis.call('INCRBY', key, ARGV[i])
    if v < 0 then redis.call('SET', key, 0, 'KEEPTTL') end
  end
end
return 1`;

interface CounterCommands {
  rgAdmit(monthly: string, running: string, monthlyLimit: number, concurrentLimit: number): Promise<[number, number, number]>;
  rgAddIfPresent(...args: (string | number)[]): Promise<number>;
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
    // An increment that may have been applied must never be sent twice.
    autoResendUnfulfilledCommands: false,
    lazyConnect: true,
  };
  return new Redis(options.url, redisOptions);
}

export class RedisCounters implements CounterStore {
  readonly kind = 'redis';
  private readonly redis: Redis & CounterCommands;

  constructor(
    redis: Redis,
    private readonly durable: SqlCounters,
  ) {
    redis.defineCommand('rgAdmit', { numberOfKeys: 2, lua: ADMIT });
    redis.defineCommand('rgAddIfPresent', { lua: ADD_IF_PRESENT });
    this.redis = redis as Redis & CounterCommands;
  }

  private keys(scope: CounterScope) {
    const tag = `{${scope.workspaceId}}`;
    return {
      workspaceSpend: `${tag}:spend:${scope.day}`,
      userSpend: `${tag}:uspend:${scope.day}:${scope.userId}`,
      monthlyRuns: `${tag}:runs:${scope.month}`,
      running: `${tag}:running`,
    };
  }

  async read(scope: CounterScope): Promise<Counters> {
    const k = this.keys(scope);
    const values = await this.redis.mget(k.workspaceSpend, k.userSpend, k.monthlyRuns, k.running);
    if (values.every((v) => v !== null)) {
      const [ws, user, monthly, running] = values.map(Number) as [number, number, number, number];
      return { workspaceDailySpendMicros: ws, userDailySpendMicros: user, monthlyRuns: monthly, concurrentRuns: running };
    }
    return this.rebuild(scope);
  }

  /** Copies the durable counters into missing keys; keys that exist (maybe ahead) are kept. */
  private async rebuild(scope: CounterScope): Promise<Counters> {
    const truth = await this.durable.read(scope);
    const k = this.keys(scope);
    await this.redis
      .multi()
      .set(k.workspaceSpend, truth.workspaceDailySpendMicros, 'EX', DAY_TTL_SECONDS, 'NX')
      .set(k.userSpend, truth.userDailySpendMicros, 'EX', DAY_TTL_SECONDS, 'NX')
      .set(k.monthlyRuns, truth.monthlyRuns, 'EX', MONTH_TTL_SECONDS, 'NX')
      .set(k.running, truth.concurrentRuns, 'NX')
      .exec();
    const values = await this.redis.mget(k.workspaceSpend, k.userSpend, k.monthlyRuns, k.running);
    const [ws, user, monthly, running] = values.map(Number) as [number, number, number, number];
    return { workspaceDailySpendMicros: ws, userDailySpendMicros: user, monthlyRuns: monthly, concurrentRuns: running };
  }

  async admitRun(_tx: Queryable, scope: CounterScope, limits: RunLimits): Promise<Admission> {
    const k = this.keys(scope);
    const admit = () =>
      this.redis.rgAdmit(k.monthlyRuns, k.running, limits.monthlyRunLimit ?? -1, limits.maxConcurrentRuns ?? -1);
    let [status, monthlyRuns, concurrentRuns] = await admit();
    if (status === -1) {
      await this.rebuild(scope);
      [status, monthlyRuns, concurrentRuns] = await admit();
      if (status === -1) throw new Error('counter keys vanished during admission');
    }
    return { admitted: status === 1, monthlyRuns, concurrentRuns };
  }

  async cancelAdmission(scope: CounterScope): Promise<void> {
    const k = this.keys(scope);
    await this.redis.rgAddIfPresent(2, k.monthlyRuns, k.running, -1, -1);
  }

  async runEnded(scope: CounterScope): Promise<void> {
    await this.redis.rgAddIfPresent(1, this.keys(scope).running, -1);
  }

  async spendAdded(scope: CounterScope, micros: number): Promise<void> {
    if (micros === 0) return;
    const k = this.keys(scope);
    await this.redis.rgAddIfPresent(2, k.workspaceSpend, k.userSpend, micros, micros);
  }

  async health(): Promise<void> {
    await this.redis.ping();
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
