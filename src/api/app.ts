/**
 * The app factory: builds the HTTP API from its dependencies. Nothing happens at import time,
 * and nothing here reads the environment; the daemon and the tests pass everything in.
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import type { Logger } from 'pino';
import { Accounts } from '../admin/accounts.js';
import { ApiKeyVerifier } from '../admin/api-key-verifier.js';
import { ApiKeys } from '../admin/api-keys.js';
import { BillingPlans } from '../admin/billing-plans.js';
import { HealthCheck } from '../admin/health-check.js';
import { OverviewReport } from '../admin/overview-report.js';
import { PricingTable } from '../admin/pricing-table.js';
import { RunHistory } from '../admin/run-history.js';
import { SdkUsers } from '../admin/sdk-users.js';
import { SpendReports } from '../admin/spend-report.js';
import { ToolUsageReport } from '../admin/tool-usage.js';
import { UsageReport } from '../admin/usage-report.js';
import { WorkspaceConfig } from '../admin/workspace-config.js';
import { createMetrics, type Metrics } from '../metrics.js';
import type { Clock } from '../clock.js';
import type { DaemonInstanceId } from '../guard/guard-context.js';
import { GuardService } from '../guard/guard-service.js';
import { GuardSettings } from '../admin/guard-settings.js';
import { Webhooks, type WebhookSettings } from '../admin/webhooks.js';
import { TokenIssuer } from '../admin/tokens.js';
import type { CounterStore } from '../store/counters/counters.js';
import type { Db } from '../store/db.js';
import { observeCounters, observeDb } from '../store/observed.js';
import { registerAuth } from './auth.js';
import { createFastify, logAnswered, ownAnswerHeaders, requestIdOf, type HttpLimits } from './http-server.js';
import { guardConnections } from './connection-guard.js';
import { registerErrorHandler } from './error-handler.js';
import { failedAuthAccounting, FailedAuthLimiter, registerFailedAuthLimit } from './failed-auth-limit.js';
import { listenUrl } from './public-url.js';
import { registerOriginChecks } from './request-origin.js';
import { registerUnreadBodyLinger } from './unread-body.js';
import { registerJsonBody } from './json-body.js';
import { observeAnswer, registerMetrics } from './metrics.js';
import { createSchemaCompilers, useSchemaCompilers, type SchemaCompilers } from './schema-compilers.js';
import { registerValidation } from './validation.js';
import { apiKeyRoutes } from './routes/api-keys.js';
import type { LocalKeyFile } from '../daemon/local-key.js';
import { authRoutes } from './routes/auth.js';
import { healthRoutes } from './routes/health.js';
import { pricingRoutes } from './routes/pricing.js';
import { runRoutes } from './routes/runs.js';
import { usageRoutes } from './routes/usage.js';
import { userRoutes } from './routes/users.js';
import { budgetRoutes } from './routes/budgets.js';
import { BudgetsAdmin } from '../admin/budgets-admin.js';
import { workspaceRoutes } from './routes/workspace.js';
import { providerRoutes } from './routes/providers.js';
import { proxyTokenRoutes } from './routes/proxy-tokens.js';
import { overviewRoutes } from './routes/overview.js';
import { pricingCatalogRoutes } from './routes/pricing-catalog.js';
import { dashboardAuthRoutes } from './routes/dashboard-auth.js';
import { registerDashboard } from './dashboard-assets.js';
import { DashboardSignIn } from '../admin/dashboard-sign-in.js';
import { webhookRoutes } from './routes/webhooks.js';
import { CallsInProgress } from '../proxy/calls-in-progress.js';
import { Counter, type Registry } from 'prom-client';
import { proxyRoutes, type ProxyOptions } from '../proxy/proxy-routes.js';
import type { AppHooks } from '../proxy/direct-calls.js';
import { deferredChildLogger } from '../logger.js';
import { NO_TELEMETRY, pricedSteps, type RunTelemetry } from '../telemetry/telemetry.js';
import { ProxyTokenIssuer } from '../proxy/proxy-token-issuer.js';
import { mcpProxyRoutes, type McpProxyOptions } from '../mcp/mcp-routes.js';
import { McpServerRegistry } from '../mcp/server-registry.js';
import { ToolPrices } from '../mcp/tool-prices.js';
import { mcpRoutes } from './routes/mcp.js';

export type { HttpLimits } from './http-server.js';

export interface AppDeps {
  db: Db;
  counters: CounterStore;
  clock: Clock;
  logger: Logger;
  version: string;
  bodyLimitBytes: number;
  auth: AuthSettings;
  /**
   * The app's metrics, served on `/metrics`. Omitted: a fresh registry of its own; `false`: no
   * metrics and no `/metrics` route.
   */
  metrics?: Metrics | false;
  /** Proxy mode: forwarding model calls to the configured providers. Absent: no proxy routes. */
  proxy?: ProxyOptions;
  /** Where MCP servers may be (the MCP proxy runs with the model proxy). @default private addresses refused */
  mcp?: McpProxyOptions;
  /** A local daemon's key file, kept up to date when its key is regenerated. */
  localKey?: LocalKeyFile;
  /** The daemon's address as clients reach it, for the URLs it hands out. Absent: where it listens. */
  publicUrl?: string | null;
  /** Host names and web origins served besides the daemon's own (request-origin.ts). */
  origins?: { allowedHosts?: readonly string[]; allowedOrigins?: readonly string[] };
  http?: HttpLimits;
  /** The built web dashboard's folder (`dist/dashboard`). Absent or not built: `/` says how to build it. */
  dashboardDir?: string;
  /** Where webhooks may go, and a test ping's timeout. @default private targets refused, 10 s */
  webhooks?: WebhookSettings;
  /**
   * This daemon process's id on its database, which its proxied calls carry, so that they are
   * recovered if it dies (jobs/daemon-instance.ts). Absent: they carry none.
   */
  instance?: DaemonInstanceId;
  /** Where runs and steps are traced (OpenTelemetry). @default none */
  telemetry?: RunTelemetry;
  /**
   * What compiles the routes' schemas. @default a set of the app's own; apps built in one
   * process may share one (schema-compilers.ts), as the tests do
   */
  schemaCompilers?: SchemaCompilers;
}

export interface AuthSettings {
  /** HS256 signing secret for dashboard tokens. */
  jwtSecret: string;
  jwtTtlSeconds: number;
  /** scrypt N; OWASP's 2^17 in production, lower in tests. */
  scryptCost: number;
  /** Login and register attempts per client address per minute. */
  rateLimitPerMinute: number;
  /** Failed authentications (401s) per client address per minute, on any route. @default 60 */
  failedAuthPerMinute?: number;
  /** Whether anyone who reaches the port may create an account. @default 'closed' */
  registration?: 'open' | 'closed';
}

/** What the MCP proxy's refusals of a server's address name. */
export const MCP_SUBJECT = { noun: 'MCP server URL', allowSetting: 'RUNGUARD_MCP_ALLOW_PRIVATE' };

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const metrics = deps.metrics === false ? null : (deps.metrics ?? createMetrics());
  const db = metrics
    ? observeDb(deps.db, (operation, code) => metrics.databaseErrors.inc({ operation, code }))
    : deps.db;
  const counters = metrics
    ? observeCounters(deps.counters, (operation) => metrics.counterStoreErrors.inc({ operation }))
    : deps.counters;
  const app = createFastify(deps.logger, deps.bodyLimitBytes, deps.http);
  if (deps.http?.maxConnections) guardConnections(app.server, deps.http.maxConnections);
  registerUnreadBodyLinger(app);
  // First of the hooks: a request for another host name, or from another site's page, is
  // answered before anything else looks at it.
  const originAdmits = registerOriginChecks(app, { publicUrl: deps.publicUrl ?? null, ...deps.origins });
  useSchemaCompilers(app, deps.schemaCompilers ?? createSchemaCompilers());
  registerValidation(app);
  registerErrorHandler(app);
  registerJsonBody(app);
  const tokenIssuer = new TokenIssuer(deps.auth.jwtSecret, deps.auth.jwtTtlSeconds);
  const accounts = new Accounts(db, tokenIssuer, deps.auth.scryptCost);
  if (metrics) registerMetrics(app, metrics);
  const keys = new ApiKeyVerifier(db);
  // Before the auth hook: an address over its failures is answered without a credential lookup.
  const failedAuth = new FailedAuthLimiter(deps.auth.failedAuthPerMinute ?? 60);
  const authenticated = (request: FastifyRequest) =>
    request.principal !== null || Boolean(request.proxyCall?.target) || Boolean(request.mcpCall?.target);
  registerFailedAuthLimit(app, failedAuth, authenticated);
  const appHooks = directCallHooks(originAdmits, failedAuth, authenticated, metrics);
  registerAuth(app, { keys, clock: deps.clock, verifyJwt: (token) => accounts.verifyToken(token) });
  // Only routes that ask for it (login, register) are limited.
  await app.register(rateLimit, { global: false });

  await registerOpenApi(app, deps.version);

  const guard = new GuardService(
    db,
    counters,
    deps.clock,
    deps.logger,
    metrics?.guardObserver ?? null,
    deps.instance ?? null,
  );
  // Answers already sent may have their records still queued for a shared commit, or (proxied
  // calls) not yet submitted: write them before whoever closes the app closes the stores.
  const proxyCalls = new CallsInProgress();
  app.addHook('onClose', async () => {
    proxyCalls.stop();
    await proxyCalls.none();
    await guard.settled();
  });
  await app.register(healthRoutes, { health: new HealthCheck(db, counters, deps.version) });
  const telemetry = pricedSteps(deps.telemetry ?? NO_TELEMETRY, (workspaceId, model) =>
    guard.prices.prices(workspaceId, model),
  );
  if (metrics && telemetry.enabled) exposeDroppedSpans(metrics.registry, telemetry);
  await app.register(runRoutes, { guard, runs: new RunHistory(db, deps.clock), telemetry });
  // Every change to what a decision reads passes here: it bumps the state version itself.
  const settings = new GuardSettings(db, counters, deps.clock, (workspaceId) => guard.prices.changed(workspaceId));
  await registerAdminRoutes(app, deps, { db, counters, settings, accounts, tokenIssuer, keys });
  const mcpOptions: McpProxyOptions = deps.mcp ?? {
    policy: { allowPrivate: false, ownPort: null, subject: MCP_SUBJECT },
  };
  const mcpServers = new McpServerRegistry(db, deps.clock, mcpOptions.policy);
  await app.register(mcpRoutes, { servers: mcpServers, toolPrices: new ToolPrices(db, deps.clock) });
  await registerDashboard(app, deps.dashboardDir);
  if (deps.proxy)
    await registerProxies(app, deps, deps.proxy, {
      guard,
      db,
      keys,
      servers: mcpServers,
      mcpOptions,
      metrics,
      calls: proxyCalls,
      telemetry,
      appHooks,
    });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  return app;
}

/**
 * The hooks above, for a proxied call that skips Fastify (proxy/direct-calls.ts): each is the
 * hook's own function, in the order Fastify runs them.
 */
function directCallHooks(
  originAdmits: (raw: IncomingMessage) => boolean,
  failedAuth: FailedAuthLimiter,
  authenticated: (request: FastifyRequest) => boolean,
  metrics: Metrics | null,
): AppHooks {
  const failedAuthAnswered = failedAuthAccounting(failedAuth, authenticated);
  return {
    admits: (raw) => originAdmits(raw) && !failedAuth.overLimit(raw.socket.remoteAddress ?? ''),
    requestId: requestIdOf,
    requestLog: (parent, id) => deferredChildLogger(parent, { reqId: id }, {}),
    arrived: (request) => request.log.debug({ req: request }, 'incoming request'),
    ownHeaders: ownAnswerHeaders,
    answered(request, answer, route) {
      const asFastify = request as unknown as FastifyRequest;
      logAnswered(asFastify, answer);
      if (metrics) observeAnswer(metrics, request.method, route, answer);
      failedAuthAnswered(asFastify, answer.statusCode);
    },
  };
}

/** The OpenAPI document's header; the routes' schemas fill in the rest (`/openapi.json`). */
async function registerOpenApi(app: FastifyInstance, version: string): Promise<void> {
  await app.register(swagger, {
    openapi: {
      info: { title: 'runguard', version: version, description: 'Guardrail sidecar for AI agents' },
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', description: 'API key (lg_...) or dashboard JWT' },
        },
      },
      security: [{ bearer: [] }],
    },
  });
}

/** The dashboard's and the admin API's routes: workspace settings, accounts, keys, reports. */
async function registerAdminRoutes(
  app: FastifyInstance,
  deps: AppDeps,
  parts: {
    db: Db;
    counters: CounterStore;
    settings: GuardSettings;
    accounts: Accounts;
    tokenIssuer: TokenIssuer;
    keys: ApiKeyVerifier;
  },
): Promise<void> {
  const { db, counters, settings, accounts, tokenIssuer, keys } = parts;
  await app.register(pricingRoutes, { pricing: new PricingTable(db, settings) });
  await app.register(workspaceRoutes, { workspace: new WorkspaceConfig(settings) });
  await app.register(authRoutes, {
    accounts,
    rateLimitPerMinute: deps.auth.rateLimitPerMinute,
    registration: deps.auth.registration ?? 'closed',
  });
  await app.register(apiKeyRoutes, { apiKeys: new ApiKeys(db, deps.clock, keys, deps.localKey, counters) });
  await app.register(userRoutes, { users: new SdkUsers(db, settings, deps.clock) });
  await app.register(budgetRoutes, { budgets: new BudgetsAdmin(db, counters, deps.clock) });
  await app.register(usageRoutes, {
    usage: new UsageReport(db, counters, settings, deps.clock),
    tools: new ToolUsageReport(db, settings, deps.clock),
    reports: new SpendReports(db),
    billing: new BillingPlans(settings),
  });
  await app.register(webhookRoutes, {
    webhooks: new Webhooks(
      db,
      deps.clock,
      deps.webhooks ?? {
        policy: { allowPrivate: false, ownPort: null },
        timeoutMs: 10_000,
        userAgent: `runguard/${deps.version}`,
      },
    ),
  });
  await app.register(overviewRoutes, { overview: new OverviewReport(db, deps.clock) });
  await app.register(pricingCatalogRoutes);
  await app.register(dashboardAuthRoutes, {
    signIn: new DashboardSignIn(db, tokenIssuer, deps.auth.scryptCost),
    clock: deps.clock,
    rateLimitPerMinute: deps.auth.rateLimitPerMinute,
  });
}

/** What the model and MCP proxies share with the rest of the app. */
interface ProxyParts {
  guard: GuardService;
  db: Db;
  keys: ApiKeyVerifier;
  servers: McpServerRegistry;
  mcpOptions: McpProxyOptions;
  metrics: Metrics | null;
  calls: CallsInProgress;
  telemetry: RunTelemetry;
  appHooks: AppHooks;
}

/** Proxy mode: the provider list, proxy tokens, and the model and MCP proxies. */
async function registerProxies(
  app: FastifyInstance,
  deps: AppDeps,
  proxyOptions: ProxyOptions,
  parts: ProxyParts,
): Promise<void> {
  const { guard, db, keys, servers: mcpServers, mcpOptions, metrics, calls: proxyCalls, telemetry, appHooks } = parts;
  const configuredUrl = deps.publicUrl ?? null;
  await app.register(providerRoutes, { providers: proxyOptions.providers });
  await app.register(proxyTokenRoutes, {
    issuer: new ProxyTokenIssuer(db, deps.clock, proxyOptions.providers, () => configuredUrl ?? listenUrl(app.server)),
  });
  await app.register(proxyRoutes, {
    guard,
    db,
    keys,
    clock: deps.clock,
    options: proxyOptions,
    metrics,
    calls: proxyCalls,
    telemetry,
    appHooks,
  });
  await app.register(mcpProxyRoutes, {
    guard,
    db,
    keys,
    clock: deps.clock,
    servers: mcpServers,
    proxy: {
      get defaultApiKey() {
        return proxyOptions.defaultApiKey;
      },
      defaultUserId: proxyOptions.defaultUserId,
      bodyLimitBytes: proxyOptions.bodyLimitBytes,
      ...(proxyOptions.bodyBudgetBytes !== undefined ? { bodyBudgetBytes: proxyOptions.bodyBudgetBytes } : {}),
    },
    options: mcpOptions,
    metrics,
    calls: proxyCalls,
  });
}

/** `runguard_otel_dropped_spans_total`: spans that never reached the collector. */
function exposeDroppedSpans(registry: Registry, telemetry: RunTelemetry): void {
  registry.registerMetric(
    new Counter({
      name: 'runguard_otel_dropped_spans_total',
      help: 'Spans dropped before reaching the OpenTelemetry collector (export queue full, or the collector refused or was down)',
      registers: [],
      collect() {
        this.reset();
        this.inc(telemetry.droppedSpans());
      },
    }),
  );
}
