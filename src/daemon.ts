/** Wires configuration to stores, the app and a listening socket. */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { buildApp } from './api/app.js';
import { bootstrapWorkspace } from './bootstrap.js';
import type { Config } from './config.js';
import { createProviderRegistry, type ProviderDefinition, type ProviderRegistry } from './proxy/provider-registry.js';
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

export async function openStores(config: Config): Promise<Stores> {
  const db = config.databaseUrl
    ? postgresDb({ connectionString: config.databaseUrl, max: config.dbPoolSize })
    : await embeddedDb(join(resolve(config.dataDir), 'pgdata'));
  try {
    await migrate(db);
    const sql = new SqlCounters(db);
    let counters: CounterStore = sql;
    if (config.redisUrl) {
      const redis = redisClient({
        url: config.redisUrl,
        keyPrefix: config.redisKeyPrefix,
        commandTimeoutMs: config.redisCommandTimeoutMs,
      });
      redis.on('error', () => {}); // Reported through /health and failed commands, not as a crash.
      await redis.connect();
      counters = new RedisCounters(redis, sql);
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

/** The built-in providers, then the configured ones. */
export function providerDefinitions(config: Config): ProviderDefinition[] {
  return [
    { name: 'openai', type: 'openai', upstream: config.openaiUpstream },
    { name: 'anthropic', type: 'anthropic', upstream: config.anthropicUpstream },
    ...Object.entries(config.providers).map(([name, p]) => ({ name, ...p })),
  ];
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', '::1', 'localhost']);

/**
 * The key the proxy guards header-less calls with: only when nothing but this machine can reach
 * the port. Configured, else the one bootstrap saved for the CLI.
 */
async function proxyDefaultKey(config: Config): Promise<string | null> {
  if (!LOOPBACK_HOSTS.has(config.host)) return null;
  if (config.proxyApiKey) return config.proxyApiKey;
  try {
    return (await readFile(join(resolve(config.dataDir), 'api-key'), 'utf8')).trim() || null;
  } catch {
    return null;
  }
}

export interface Daemon {
  app: FastifyInstance;
  url: string;
  stores: Stores;
  close(): Promise<void>;
}

export async function startDaemon(config: Config, logger: Logger, out: NodeJS.WritableStream = process.stdout): Promise<Daemon> {
  const stores = await openStores(config);
  const created = await bootstrapWorkspace(stores.db, config.defaultPlan, resolve(config.dataDir));
  if (created) {
    // Shown once, on the terminal only: never through the logger.
    out.write(
      `runguard: created the default workspace (${config.defaultPlan} plan).\n` +
        `runguard: API key: ${created.apiKey}\nrunguard: saved to ${created.keyFile} (mode 0600); it is not shown again.\n`,
    );
  }
  const providers: ProviderRegistry = createProviderRegistry(providerDefinitions(config), {
    connectTimeoutMs: config.proxyConnectTimeoutMs,
    headersTimeoutMs: config.proxyHeadersTimeoutMs,
    bodyTimeoutMs: config.proxyBodyTimeoutMs,
    connectionsPerUpstream: config.proxyConnectionsPerUpstream,
  });
  let app: FastifyInstance;
  let address: string;
  try {
    app = await buildApp({
      db: stores.db,
      counters: stores.counters,
      clock: systemClock,
      logger,
      version: VERSION,
      bodyLimitBytes: config.bodyLimitBytes,
      proxy: {
        providers,
        defaultApiKey: await proxyDefaultKey(config),
        defaultUserId: config.proxyDefaultUserId,
        bodyLimitBytes: config.proxyBodyLimitBytes,
        audit: { maxBytes: config.proxyAuditMaxBytes, includePrompt: config.proxyAuditPrompts },
      },
    });
    address = await app.listen({ host: config.host, port: config.port });
  } catch (error) {
    await providers.close().catch(() => {});
    await stores.close().catch(() => {});
    throw error;
  }
  logger.info({ url: address, database: stores.db.kind, counters: stores.counters.kind }, 'runguard listening');
  return {
    app,
    url: address,
    stores,
    async close() {
      await app.close();
      await providers.close();
      await stores.close();
    },
  };
}
