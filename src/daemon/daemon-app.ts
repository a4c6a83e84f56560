/**
 * The app a daemon serves, built from its configuration: on a first start the default workspace
 * and its key (bootstrap.ts), then the local key file, metrics, tracing, the providers, and
 * `buildApp` given every setting it takes.
 */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { buildApp, MCP_SUBJECT, type AppDeps } from '../api/app.js';
import { connectionCapFor, openFileLimit } from '../api/connection-guard.js';
import { systemClock } from '../clock.js';
import type { Config } from '../config.js';
import type { DaemonInstance } from '../jobs/daemon-instance.js';
import { createMetrics, type Metrics } from '../metrics.js';
import { createProviderRegistry, type ProviderDefinition, type ProviderRegistry } from '../proxy/provider-registry.js';
import { sharedSecret } from '../store/accounts.js';
import { buildLateIndexesNow } from '../store/late-indexes.js';
import { findApiKey } from '../store/workspaces.js';
import { loadTelemetry, type RunTelemetry } from '../telemetry/telemetry.js';
import { VERSION } from '../version.js';
import type { OutboundPolicy } from '../webhooks/outbound-policy.js';
import { bootstrapWorkspace, type Bootstrapped } from './bootstrap.js';
import { mcpAllowsPrivate, proxyDefaultKey, registrationPolicy } from './exposure.js';
import { LocalKeyFile } from './local-key.js';
import type { Stores } from './stores.js';
import { noticeCreatedWorkspace } from './terminal-notices.js';

export interface DaemonAppDeps {
  stores: Stores;
  logger: Logger;
  /** The terminal, where a first start shows the new key. */
  out: NodeJS.WritableStream;
  /** Where webhooks may go (its port is the one bound, once the daemon listens). */
  webhookPolicy: OutboundPolicy;
  instance: DaemonInstance;
}

export interface DaemonApp {
  app: FastifyInstance;
  providers: ProviderRegistry;
  metrics: Metrics | false;
  /** The workspace this start created; null when the database had one. */
  created: Bootstrapped | null;
  localKey: LocalKeyFile;
  telemetry: RunTelemetry;
}

export async function buildDaemonApp(config: Config, deps: DaemonAppDeps): Promise<DaemonApp> {
  const { stores, logger } = deps;
  if (stores.db.kind === 'embedded') await buildLateIndexesNow(stores.db);
  const dataDir = resolve(config.dataDir);
  const created = await bootstrapWorkspace(stores.db, config.defaultPlan, dataDir, databaseName(config));
  if (created) noticeCreatedWorkspace(deps.out, config.defaultPlan, created);
  const localKey = await LocalKeyFile.open(dataDir, async (prefix) => (await findApiKey(stores.db, prefix)) !== null);
  const metrics: Metrics | false = config.metricsEnabled ? createMetrics() : false;
  // The OpenTelemetry SDK is loaded only when the standard OTEL_* variables ask for it.
  const telemetry = await loadTelemetry(process.env, VERSION);
  if (telemetry.enabled) logger.info({ endpoint: otelEndpoint(process.env) }, 'exporting traces over OTLP');
  const providers = providerRegistry(config);
  // Configured, or generated once and shared by every daemon on the database.
  const jwtSecret = config.jwtSecret ?? (await sharedSecret(stores.db, 'jwt_secret'));
  const app = await buildApp(appDeps(config, { ...deps, localKey, metrics, telemetry, providers, jwtSecret }));
  return { app, providers, metrics, created, localKey, telemetry };
}

/** What the app is built from: the stores and the parts made above, and the settings. */
function appDeps(
  config: Config,
  parts: DaemonAppDeps & Omit<DaemonApp, 'app' | 'created'> & { jwtSecret: string },
): AppDeps {
  const { stores, webhookPolicy, localKey } = parts;
  return {
    db: stores.db,
    counters: stores.counters,
    clock: systemClock,
    logger: parts.logger,
    version: VERSION,
    bodyLimitBytes: config.bodyLimitBytes,
    auth: {
      jwtSecret: parts.jwtSecret,
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
    metrics: parts.metrics,
    localKey,
    // In dist/, beside this module's folder: `npm run build` writes the dashboard there.
    dashboardDir: fileURLToPath(new URL('../dashboard/', import.meta.url)),
    webhooks: { policy: webhookPolicy, timeoutMs: config.webhookTimeoutMs, userAgent: `runguard/${VERSION}` },
    mcp: {
      policy: {
        allowPrivate: mcpAllowsPrivate(config),
        get ownPort() {
          return webhookPolicy.ownPort;
        },
        subject: MCP_SUBJECT,
      },
      upstream: { connectTimeoutMs: config.proxyConnectTimeoutMs, headersTimeoutMs: config.proxyHeadersTimeoutMs },
    },
    instance: parts.instance,
    telemetry: parts.telemetry,
    proxy: {
      providers: parts.providers,
      // Read per call (a getter): the local key file's key changes when it is regenerated.
      get defaultApiKey() {
        return proxyDefaultKey(config, localKey);
      },
      defaultUserId: config.proxyDefaultUserId,
      bodyLimitBytes: config.proxyBodyLimitBytes,
      bodyBudgetBytes: config.proxyBodyBudgetBytes,
      audit: { maxBytes: config.proxyAuditMaxBytes, includePrompt: config.proxyAuditPrompts },
    },
  };
}

/** The built-in providers, then the configured ones, with the proxy's timeouts and pool size. */
function providerRegistry(config: Config): ProviderRegistry {
  const definitions: ProviderDefinition[] = [
    { name: 'openai', type: 'openai', upstream: config.openaiUpstream, setBy: 'RUNGUARD_OPENAI_UPSTREAM' },
    { name: 'anthropic', type: 'anthropic', upstream: config.anthropicUpstream, setBy: 'RUNGUARD_ANTHROPIC_UPSTREAM' },
    { name: 'google', type: 'google', upstream: config.googleUpstream, setBy: 'RUNGUARD_GOOGLE_UPSTREAM' },
    ...Object.entries(config.providers).map(([name, provider]) => ({
      name,
      ...provider,
      setBy: `RUNGUARD_PROVIDERS (${name})`,
    })),
  ];
  return createProviderRegistry(definitions, {
    connectTimeoutMs: config.proxyConnectTimeoutMs,
    headersTimeoutMs: config.proxyHeadersTimeoutMs,
    bodyTimeoutMs: config.proxyBodyTimeoutMs,
    connectionsPerUpstream: config.proxyConnectionsPerUpstream,
  });
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

/** The collector's address as the exporters read it, for the log (no credentials: headers are apart). */
function otelEndpoint(env: NodeJS.ProcessEnv): string | undefined {
  return (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_ENDPOINT)?.trim();
}
