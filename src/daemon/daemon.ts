/* eslint-disable max-lines -- split at its seams is still to do (issue #53) */
/** Wires configuration to stores, the app and a listening socket. */
import { loadTelemetry } from '../telemetry/telemetry.js';
import { join, resolve } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { buildApp, MCP_SUBJECT } from '../api/app.js';
import { connectionCapFor, openFileLimit } from '../api/connection-guard.js';
import { fileURLToPath } from 'node:url';
import { bootstrapWorkspace } from './bootstrap.js';
import { cliCommand } from '../cli-command.js';
import { SIGN_IN_LINK_TTL_MS } from '../admin/dashboard-sign-in.js';
import { createSignInLink } from '../store/sign-in-links.js';
import { LocalKeyFile } from './local-key.js';
import { recordDaemon } from './local-daemon.js';
import { sharedSecret } from '../store/accounts.js';
import { findApiKey } from '../store/workspaces.js';
import type { Config } from '../config.js';
import { createMetrics, type Metrics } from '../metrics.js';
import { createProviderRegistry, type ProviderDefinition } from '../proxy/provider-registry.js';
import { systemClock } from '../clock.js';
import { periodicReconcile } from '../jobs/reconcile.js';
import { createStaleRunSweeper } from '../jobs/stale-run-sweeper.js';
import { startDaemonInstance, type DaemonInstance } from '../jobs/daemon-instance.js';
import { createResultRecovery } from '../jobs/result-recovery.js';
import type { CounterStore } from '../store/counters/counters.js';
import { embeddedDb, postgresDb, type Db } from '../store/db.js';
import { IDEMPOTENCY_PURGE_INTERVAL_MS } from '../store/idempotency.js';
import { buildLateIndexes, buildLateIndexesNow } from '../store/late-indexes.js';
import { migrate } from '../store/migrations.js';
import { startIdleMemory } from './idle-memory.js';
import { RedisCounters, redisClient } from '../store/counters/redis-counters.js';
import { SqlCounters } from '../store/counters/sql-counters.js';
import { WebhookDispatcher } from '../webhooks/dispatcher.js';
import type { OutboundPolicy } from '../webhooks/outbound-policy.js';

import { VERSION } from '../version.js';

export { VERSION };

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

/** The built-in providers, then the configured ones. */
export function providerDefinitions(config: Config): ProviderDefinition[] {
  return [
    { name: 'openai', type: 'openai', upstream: config.openaiUpstream, setBy: 'RUNGUARD_OPENAI_UPSTREAM' },
    { name: 'anthropic', type: 'anthropic', upstream: config.anthropicUpstream, setBy: 'RUNGUARD_ANTHROPIC_UPSTREAM' },
    { name: 'google', type: 'google', upstream: config.googleUpstream, setBy: 'RUNGUARD_GOOGLE_UPSTREAM' },
    ...Object.entries(config.providers).map(([name, p]) => ({ name, ...p, setBy: `RUNGUARD_PROVIDERS (${name})` })),
  ];
}

/** What names the database in a key file's name: Postgres's database, else `embedded`. */
function databaseName(config: Pick<Config, 'databaseUrl'>): string {
  if (!config.databaseUrl) return 'embedded';
  try {
    return decodeURIComponent(new URL(config.databaseUrl).pathname.slice(1)) || 'postgres';
  } catch {
    return 'postgres';
  }
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', '::1', 'localhost']);

/**
 * The key the proxy guards header-less calls with: only when nothing but this machine can reach
 * the port. Configured, else the one bootstrap saved for the CLI (as it is now: regenerated, it
 * is replaced there).
 */
function proxyDefaultKey(config: Config, localKey: LocalKeyFile): string | null {
  if (!LOOPBACK_HOSTS.has(config.host)) return null;
  return config.proxyApiKey ?? localKey.current;
}

/** Who may register when the configuration does not say: anyone only where only this machine can reach the port. */
export function registrationPolicy(config: Pick<Config, 'registration' | 'host'>): 'open' | 'closed' {
  return config.registration ?? (LOOPBACK_HOSTS.has(config.host) ? 'open' : 'closed');
}

export interface Daemon {
  app: FastifyInstance;
  url: string;
  stores: Stores;
  /**
   * Stops accepting connections, lets in-flight requests and streams finish for up to
   * `shutdownGraceMs`, cuts what is still open, then closes the stores. Records are written in
   * transactions and the pools wait for their checked-out clients, so nothing is half-written.
   */
  close(): Promise<void>;
}

/** Everything between the stores and the listening socket: bootstrap, the providers, the app. */
// eslint-disable-next-line max-lines-per-function -- split at its seams is still to do (issue #53)
async function prepare(
  config: Config,
  logger: Logger,
  stores: Stores,
  out: NodeJS.WritableStream,
  webhookPolicy: OutboundPolicy,
  instance: DaemonInstance,
) {
  if (stores.db.kind === 'embedded') await buildLateIndexesNow(stores.db);
  const created = await bootstrapWorkspace(
    stores.db,
    config.defaultPlan,
    resolve(config.dataDir),
    databaseName(config),
  );
  if (created) {
    // Shown once, on the terminal only: never through the logger.
    out.write(
      `runguard: created the default workspace (${config.defaultPlan} plan).\n` +
        `runguard: API key: ${created.apiKey}\nrunguard: saved to ${created.keyFile} (mode 0600); it is not shown again.\n`,
    );
  }
  const localKey = await LocalKeyFile.open(
    resolve(config.dataDir),
    async (prefix) => (await findApiKey(stores.db, prefix)) !== null,
  );
  const metrics: Metrics | false = config.metricsEnabled ? createMetrics() : false;
  // The OpenTelemetry SDK is loaded only when the standard OTEL_* variables ask for it.
  const telemetry = await loadTelemetry(process.env, VERSION);
  if (telemetry.enabled) logger.info({ endpoint: otelEndpoint(process.env) }, 'exporting traces over OTLP');
  const providers = createProviderRegistry(providerDefinitions(config), {
    connectTimeoutMs: config.proxyConnectTimeoutMs,
    headersTimeoutMs: config.proxyHeadersTimeoutMs,
    bodyTimeoutMs: config.proxyBodyTimeoutMs,
    connectionsPerUpstream: config.proxyConnectionsPerUpstream,
  });
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
      failedAuthPerMinute: config.authFailuresPerMinute,
      registration: registrationPolicy(config),
    },
    publicUrl: config.publicUrl,
    origins: { allowedHosts: config.allowedHosts, allowedOrigins: config.allowedOrigins },
    http: {
      requestTimeoutMs: config.requestTimeoutMs,
      headersTimeoutMs: config.headersTimeoutMs,
      maxConnections: config.maxConnections || connectionCapFor(openFileLimit()),
    },
    metrics,
    localKey,
    // In dist/, beside this module's folder: `npm run build` writes the dashboard there.
    dashboardDir: fileURLToPath(new URL('../dashboard/', import.meta.url)),
    webhooks: { policy: webhookPolicy, timeoutMs: config.webhookTimeoutMs, userAgent: `runguard/${VERSION}` },
    // Local MCP servers are common: a daemon only this machine reaches may call them; one reachable
    // from beyond must not become a way into the operator's network unless told so.
    mcp: {
      policy: {
        allowPrivate: LOOPBACK_HOSTS.has(config.host) || config.mcpAllowPrivate,
        get ownPort() {
          return webhookPolicy.ownPort;
        },
        subject: MCP_SUBJECT,
      },
      upstream: { connectTimeoutMs: config.proxyConnectTimeoutMs, headersTimeoutMs: config.proxyHeadersTimeoutMs },
    },
    instance,
    telemetry,
    proxy: {
      providers,
      // Read per call (a getter): the local key file's key changes when it is regenerated.
      get defaultApiKey() {
        return proxyDefaultKey(config, localKey);
      },
      defaultUserId: config.proxyDefaultUserId,
      bodyLimitBytes: config.proxyBodyLimitBytes,
      bodyBudgetBytes: config.proxyBodyBudgetBytes,
      audit: { maxBytes: config.proxyAuditMaxBytes, includePrompt: config.proxyAuditPrompts },
    },
  });
  return { app, providers, metrics, created, localKey, telemetry };
}

/**
 * On the start that created the workspace, a first sign-in link on the terminal (never through the
 * logger), beside the key: the operator is one click from the dashboard. It works once, for 10
 * minutes; `runguard dashboard` prints another.
 */
async function printFirstSignInLink(
  db: Db,
  workspaceId: string,
  address: string,
  out: NodeJS.WritableStream,
  logger: Logger,
) {
  try {
    const link = await createSignInLink(db, workspaceId, systemClock.now(), SIGN_IN_LINK_TTL_MS);
    out.write(`runguard: open ${address}/sign-in#token=${link.token} to sign in (works once, for 10 minutes)\n`);
  } catch (error) {
    logger.warn({ err: error }, `no first sign-in link: run \`${cliCommand('dashboard')}\` for one`);
  }
}

export interface StartOptions {
  /** Record the daemon's URL for the CLI (see local-daemon.ts), with the user-level path read from this environment. */
  recordFor?: NodeJS.ProcessEnv;
}

// eslint-disable-next-line max-lines-per-function -- split at its seams is still to do (issue #53)
export async function startDaemon(
  config: Config,
  logger: Logger,
  out: NodeJS.WritableStream = process.stdout,
  options: StartOptions = {},
): Promise<Daemon> {
  const stores = await openStores(config, logger);
  // Where webhooks may go; the port is the one bound, once the daemon listens (0 picks one).
  const webhookPolicy: OutboundPolicy = { allowPrivate: config.webhookAllowPrivate, ownPort: config.port || null };
  // A start that fails past here closes the stores: an embedded database's lock goes with them.
  const failed = async (error: unknown): Promise<never> => {
    await stores.close().catch(() => {});
    throw error;
  };
  // Registered before any call is taken: every proxied call carries this process's id.
  const instance = await startDaemonInstance({
    db: stores.db,
    logger: logger.child({ component: 'daemon-instance' }),
    version: VERSION,
    heartbeatMs: config.daemonHeartbeatIntervalMs,
  }).catch(failed);
  const { app, providers, metrics, created, localKey, telemetry } = await prepare(
    config,
    logger,
    stores,
    out,
    webhookPolicy,
    instance,
  ).catch(async (error: unknown) => {
    await instance.stop().catch(() => {});
    return failed(error);
  });
  const recovery = createResultRecovery({
    db: stores.db,
    counters: stores.counters,
    clock: systemClock,
    logger: logger.child({ component: 'result-recovery' }),
    self: () => instance.id,
    leaseMs: config.daemonLeaseMs,
    // Another daemon's lapsed heartbeat counts once this one has beaten its own for a whole lease:
    // after an outage of Postgres, every heartbeat lapsed, and the live daemons beat again first.
    leaseTrusted: () => instance.healthyForMs() >= config.daemonLeaseMs,
    intervalMs: config.resultRecoveryIntervalMs,
    // One process at a time holds an embedded database (its directory lock): any other is dead.
    othersDead: stores.db.kind === 'embedded',
    onLost: metrics ? (count) => metrics.resultsLost.inc(count) : undefined,
  });
  const sweeper = createStaleRunSweeper({
    db: stores.db,
    clock: systemClock,
    logger: logger.child({ component: 'stale-run-sweeper' }),
    idleMs: config.staleRunIdleMs,
    intervalMs: config.staleRunSweepIntervalMs,
    // The same timer purges the idempotency records past their retention, hourly (stop() ends both).
    idempotencyPurgeIntervalMs: IDEMPOTENCY_PURGE_INTERVAL_MS,
    onEnded: metrics ? (count) => metrics.staleRunsEnded.inc(count) : undefined,
  });
  const webhooks = new WebhookDispatcher({
    db: stores.db,
    clock: systemClock,
    logger: logger.child({ component: 'webhooks' }),
    policy: webhookPolicy,
    userAgent: `runguard/${VERSION}`,
    concurrency: config.webhookConcurrency,
    timeoutMs: config.webhookTimeoutMs,
    pollIntervalMs: config.webhookPollIntervalMs,
    retryBaseMs: config.webhookRetryBaseMs,
    maxAgeMs: 24 * 3_600_000,
    scanIntervalMs: config.webhookScanIntervalMs,
    denialWindowMs: config.webhookDenialWindowMs,
    thresholdsPpm: config.webhookBudgetThresholds.map((f) => Math.round(f * 1_000_000)),
    retentionMs: config.webhookRetentionDays * 86_400_000,
  });
  const reconciler = periodicReconcile({
    db: stores.db,
    counters: stores.counters,
    clock: systemClock,
    logger: logger.child({ component: 'reconcile' }),
    intervalMs: config.reconcileIntervalMs,
  });
  // What a dead daemon (this one's last life, too) left unfinished is ended before the first call.
  await recovery.start();
  let address: string;
  try {
    address = await app.listen({ host: config.host, port: config.port });
    // The port actually bound (0 in the configuration picks one): webhooks never go to it.
    webhookPolicy.ownPort = Number(new URL(address).port) || webhookPolicy.ownPort;
  } catch (error) {
    await app.close().catch(() => {});
    await telemetry.shutdown();
    await providers.close().catch(() => {});
    await recovery.stop();
    await instance.stop().catch(() => {});
    await stores.close().catch(() => {});
    throw error;
  }
  sweeper.start();
  reconciler.start();
  webhooks.start();
  // The memory a load grew is given back once the daemon is idle (see idle-memory.ts).
  const idleMemory = startIdleMemory();
  const indexes = config.databaseUrl
    ? buildLateIndexes(config.databaseUrl, logger.child({ component: 'indexes' }))
    : null;
  logger.info({ url: address, database: stores.db.kind, counters: stores.counters.kind }, 'runguard listening');
  const forget = options.recordFor ? recordListening(config, app, localKey.path, options.recordFor, logger) : () => {};
  // Where a browser reaches the daemon: the configured public URL, else where it listens.
  const dashboardUrl = config.publicUrl?.replace(/\/+$/, '') ?? address;
  out.write(
    `runguard: dashboard at ${dashboardUrl}/ (sign in with \`${cliCommand('dashboard')}\`: it prints a one-time link)\n`,
  );
  if (created) await printFirstSignInLink(stores.db, created.workspaceId, dashboardUrl, out, logger);
  let closing: Promise<void> | null = null;
  return {
    app,
    url: address,
    stores,
    close() {
      closing ??= (async () => {
        forget();
        idleMemory.stop();
        // The socket stops accepting at once; the background jobs stop beside it (they use the
        // stores, closed once all are done).
        await Promise.all([
          closeWithin(app, config.shutdownGraceMs, logger),
          sweeper.stop(),
          reconciler.stop(),
          indexes?.stop(),
          webhooks.stop(),
          recovery.stop(),
        ]);
        // Every call's result is written (the app's close waited for them): nothing to recover.
        await instance.stop();
        await telemetry.shutdown();
        await providers.close();
        await stores.close();
      })();
      return closing;
    },
  };
}

/** Where the CLI finds this daemon: its port on loopback when it listens on every address. */
function recordListening(
  config: Config,
  app: FastifyInstance,
  keyFile: string,
  env: NodeJS.ProcessEnv,
  logger: Logger,
): () => void {
  const { port } = app.server.address() as AddressInfo;
  const host = ['', '0.0.0.0', '::'].includes(config.host) ? '127.0.0.1' : config.host;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return recordDaemon(
    {
      url,
      data_dir: resolve(config.dataDir),
      key_file: keyFile,
      pid: process.pid,
      started_at: new Date().toISOString(),
    },
    env,
    (file, error) =>
      logger.warn({ file, err: error }, 'cannot record where this daemon listens; the CLI may not find it'),
  );
}

/** `app.close()`, but connections still open after `graceMs` are cut. */
async function closeWithin(app: FastifyInstance, graceMs: number, logger: Logger): Promise<void> {
  const closed = app.close();
  // A keep-alive connection whose last request finished after close began is idle now: close it
  // rather than wait for the client to (Node only closes the ones idle when close was called).
  const sweepIdle = setInterval(() => app.server.closeIdleConnections(), 50);
  void closed.finally(() => clearInterval(sweepIdle)).catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<'expired'>((resolve) => {
    timer = setTimeout(() => resolve('expired'), graceMs);
  });
  const outcome = await Promise.race([closed.then(() => 'closed' as const), expired]);
  clearTimeout(timer);
  if (outcome === 'expired') {
    logger.warn({ graceMs }, 'shutdown grace period over; closing the connections still open');
    app.server.closeAllConnections();
    await closed;
  }
}

/** The collector's address as the exporters read it, for the log (no credentials: headers are apart). */
function otelEndpoint(env: NodeJS.ProcessEnv): string | undefined {
  return (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_ENDPOINT)?.trim();
}
