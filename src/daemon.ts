/** Wires configuration to stores, the app and a listening socket. */
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { buildApp } from './api/app.js';
import { bootstrapWorkspace } from './bootstrap.js';
import { sharedSecret } from './store/accounts.js';
import type { Config } from './config.js';
import { systemClock } from './service/guard-service.js';
import type { CounterStore } from './store/counters.js';
import { embeddedDb, postgresDb, type Db } from './store/db.js';
import { migrate } from './store/migrations.js';
import { RedisCounters, redisClient } from './store/redis-counters.js';
import { SqlCounters } from './store/sql-counters.js';

export const VERSION: string = (createRequire(import.meta.url)('../package.json') as { version: string }).version;

export interface Stores {
  db: Db;
  counters: CounterStore;
  close(): Promise<void>;
}

export async function openStores(config: Config, logger?: Logger): Promise<Stores> {
  const db = config.databaseUrl
    ? postgresDb({ connectionString: config.databaseUrl, max: config.dbPoolSize })
    : await embeddedDb(join(resolve(config.dataDir), 'pgdata'));
  try {
    await migrate(db);
    let counters: CounterStore = new SqlCounters(db);
    if (config.redisUrl) {
      const redis = redisClient({
        url: config.redisUrl,
        keyPrefix: config.redisKeyPrefix,
        commandTimeoutMs: config.redisCommandTimeoutMs,
      });
      redis.on('error', () => {}); // Reported through /health and failed commands, not as a crash.
      await redis.connect();
      counters = new RedisCounters(redis, db, logger);
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

export interface Daemon {
  app: FastifyInstance;
  url: string;
  stores: Stores;
  close(): Promise<void>;
}

export async function startDaemon(config: Config, logger: Logger, out: NodeJS.WritableStream = process.stdout): Promise<Daemon> {
  const stores = await openStores(config, logger);
  const created = await bootstrapWorkspace(stores.db, config.defaultPlan, resolve(config.dataDir));
  if (created) {
    // Shown once, on the terminal only: never through the logger.
    out.write(
      `runguard: created the default workspace (${config.defaultPlan} plan).\n` +
        `runguard: API key: ${created.apiKey}\nrunguard: saved to ${created.keyFile} (mode 0600); it is not shown again.\n`,
    );
  }
  const app = await buildApp({
    db: stores.db,
    counters: stores.counters,
    clock: systemClock,
    logger,
    version: VERSION,
    bodyLimitBytes: config.bodyLimitBytes,
    auth: {
      // Configured, or generated once and shared by every daemon on the database.
      jwtSecret: config.jwtSecret ?? (await sharedSecret(stores.db, 'jwt_secret')),
      jwtTtlSeconds: config.jwtTtlSeconds,
      scryptCost: config.scryptCost,
      rateLimitPerMinute: config.authRateLimitPerMinute,
    },
  });
  const address = await app.listen({ host: config.host, port: config.port });
  logger.info({ url: address, database: stores.db.kind, counters: stores.counters.kind }, 'runguard listening');
  return {
    app,
    url: address,
    stores,
    async close() {
      await app.close();
      await stores.close();
    },
  };
}
