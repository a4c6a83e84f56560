/**
 * The stores a daemon, `runguard migrate` and `runguard reconcile` open: the configured database
 * (Postgres at DATABASE_URL, else the embedded one in the data directory) and the counters on it
 * (a copy on Redis when REDIS_URL is set, else SQL).
 */
import { join, resolve } from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import type { CounterStore } from '../store/counters/counters.js';
import { SqlCounters } from '../store/counters/sql-counters.js';
import { embeddedDb, postgresDb, type Db } from '../store/db.js';
import { migrate } from '../store/migrations.js';

export interface Stores {
  db: Db;
  counters: CounterStore;
  close(): Promise<void>;
}

/** The configured database: Postgres at DATABASE_URL, else the embedded one in the data dir. */
export async function openDb(config: Pick<Config, 'databaseUrl' | 'dbPoolSize' | 'dataDir'>): Promise<Db> {
  return config.databaseUrl
    ? postgresDb({ connectionString: config.databaseUrl, max: config.dbPoolSize })
    : embeddedDb(join(resolve(config.dataDir), 'pgdata'));
}

export interface OpenStoresOptions {
  /**
   * What is done to the schema before the counters open, instead of migrating it (a command that
   * must change nothing checks it is current); what it throws fails the open. Default: `migrate`.
   */
  schema?: (db: Db) => Promise<unknown>;
}

export async function openStores(config: Config, logger?: Logger, options: OpenStoresOptions = {}): Promise<Stores> {
  const db = await openDb(config);
  try {
    await (options.schema ?? migrate)(db);
    let counters: CounterStore = new SqlCounters(db);
    if (config.redisUrl) {
      // Loaded here, not at the top: ioredis is some 40 modules a daemon without Redis never uses.
      const { RedisCounters, redisClient } = await import('../store/counters/redis-counters.js');
      const redis = redisClient({
        url: config.redisUrl,
        keyPrefix: config.redisKeyPrefix,
        commandTimeoutMs: config.redisCommandTimeoutMs,
      });
      redis.on('error', () => {}); // Reported through /health and failed commands, not as a crash.
      counters = new RedisCounters(redis, db, logger);
      // Redis is a copy: a daemon starts without it, decides from Postgres, and ioredis keeps
      // reconnecting in the background.
      await redis.connect().catch((error: unknown) => {
        logger?.warn({ err: error }, 'Redis unavailable at start: decisions read spend from Postgres until it answers');
      });
    }
    return {
      db,
      counters,
      async close() {
        await counters.close();
        await db.close();
      },
    };
  } catch (error) {
    await db.close().catch(() => {});
    throw error;
  }
}
