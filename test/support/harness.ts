/**
 * Starts the real app on a real socket against real stores, with a workspace and an API key,
 * and talks to it over HTTP.
 */
import type { PlanName } from '../../src/contract/usage.js';
import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { AuditOptions } from '../../src/proxy/audit-summary.js';
import { createProviderRegistry, type ProviderDefinition } from '../../src/proxy/provider-registry.js';
import { buildApp, MCP_SUBJECT, type AppDeps, type AuthSettings } from '../../src/api/app.js';
import { createSchemaCompilers } from '../../src/api/schema-compilers.js';
import type { McpProxyOptions } from '../../src/mcp/mcp-routes.js';
import { createLogger } from '../../src/logger.js';
import type { Clock } from '../../src/clock.js';
import type { CounterStore } from '../../src/store/counters/counters.js';
import { embeddedDb, postgresDb, type Db } from '../../src/store/db.js';
import { migrate } from '../../src/store/migrations.js';
import { RedisCounters, redisClient } from '../../src/store/counters/redis-counters.js';
import { SqlCounters } from '../../src/store/counters/sql-counters.js';
import { createApiKey, createWorkspace } from '../../src/store/workspaces.js';
import { startFakeUpstream, type FakeUpstream, type FakeUpstreamOptions } from './fake-upstream.js';
import type {} from './provided-context.js';
import { createTestDatabase, REDIS_URL, testKeyPrefix } from './services.js';

/** Dashboard-token settings for apps built in tests: a cheap scrypt cost, a known secret. */
export const TEST_AUTH: AuthSettings = {
  jwtSecret: 'test-secret-test-secret-test-secret-0123',
  jwtTtlSeconds: 3600,
  scryptCost: 1024,
  rateLimitPerMinute: 1000,
  failedAuthPerMinute: 100_000,
  registration: 'open',
};

/**
 * One set of schema compilers for every app this process builds: each route schema is compiled
 * once, not once per app (hundreds in a run, a third of a second of CPU each).
 */
const SCHEMA_COMPILERS = createSchemaCompilers();

export type Backend = 'postgres+redis' | 'postgres+sql' | 'embedded';
export const BACKENDS: Backend[] = ['postgres+redis', 'postgres+sql', 'embedded'];

export interface TestStores {
  db: Db;
  counters: CounterStore;
  backend: Backend;
  databaseUrl: string | null;
  redisKeyPrefix: string | null;
  close(): Promise<void>;
}

export async function openTestStores(backend: Backend, options: { redisDb?: number } = {}): Promise<TestStores> {
  const cleanups: (() => Promise<void>)[] = [];
  let db: Db;
  let databaseUrl: string | null = null;
  if (backend === 'embedded') {
    const dir = await mkdtemp(join(tmpdir(), 'rg-embedded-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    // A copy of the migrated template (embedded-template.ts), not an initdb; a config without the
    // global setup provides none, and pays for the initdb. Imported here, not above: the bench
    // imports this file outside vitest, and never opens an embedded database.
    const { inject } = await import('vitest');
    const template = inject('embeddedTemplate') as string | undefined;
    if (template) await cp(template, dir, { recursive: true });
    db = await embeddedDb(dir);
  } else {
    // A copy of the migrated template (postgres-template.ts); the bench runs this outside vitest,
    // where there is none to inject.
    const template = process.env.VITEST
      ? ((await import('vitest')).inject('postgresTemplate') as string | undefined)
      : undefined;
    const database = await createTestDatabase(template ? { template } : {});
    databaseUrl = database.url;
    db = postgresDb({ connectionString: database.url, max: 20 });
    cleanups.push(database.drop);
  }
  cleanups.unshift(() => db.close());
  await migrate(db);
  let counters: CounterStore = new SqlCounters(db);
  let redisKeyPrefix: string | null = null;
  if (backend === 'postgres+redis') {
    redisKeyPrefix = testKeyPrefix();
    const url = options.redisDb === undefined ? REDIS_URL : `${REDIS_URL}/${options.redisDb}`;
    const redis = redisClient({ url, keyPrefix: redisKeyPrefix });
    await redis.connect();
    counters = new RedisCounters(redis, db);
    cleanups.unshift(() => counters.close());
  }
  return {
    db,
    counters,
    backend,
    databaseUrl,
    redisKeyPrefix,
    async close() {
      for (const cleanup of cleanups) await cleanup();
    },
  };
}

export interface Response<T = any> {
  status: number;
  body: T;
  headers: Headers;
}

export interface Caller {
  request<T = any>(
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<Response<T>>;
}

export function caller(baseUrl: string, apiKey: string | null): Caller {
  return {
    async request<T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
      const init: RequestInit = { method, headers: { ...headers } };
      if (apiKey) (init.headers as Record<string, string>).authorization = `Bearer ${apiKey}`;
      if (body !== undefined) {
        (init.headers as Record<string, string>)['content-type'] ??= 'application/json';
        init.body = typeof body === 'string' ? body : JSON.stringify(body);
      }
      const res = await fetch(baseUrl + path, init);
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = text ? JSON.parse(text) : null;
      } catch {
        /* not JSON: keep the text */
      }
      // The caller names the answer's type: asserted here, checked by the test's own assertions.
      return { status: res.status, body: parsed as T, headers: res.headers };
    },
  };
}

export interface TestApi extends Caller {
  url: string;
  app: FastifyInstance;
  stores: TestStores;
  workspaceId: string;
  apiKey: string;
  /** Another workspace with its own key, for isolation checks. */
  newWorkspace(plan?: PlanName): Promise<{ workspaceId: string; apiKey: string; api: Caller }>;
  /** Sets workspace columns directly (budgets in microdollars). */
  setWorkspace(values: Record<string, unknown>, workspaceId?: string): Promise<void>;
  close(): Promise<void>;
}

export interface TestProxyOptions {
  /** Upstream of both built-in providers (a fake upstream's URL). */
  upstream: string;
  /** More providers. */
  providers?: ProviderDefinition[];
  /** The first workspace's key as the daemon's own key (a loopback daemon's default). */
  workspaceKeyAsDefault?: boolean;
  defaultUserId?: string | null;
  bodyLimitBytes?: number;
  bodyBudgetBytes?: number;
  headersTimeoutMs?: number;
  audit?: AuditOptions;
  webSocketIdleMs?: number;
}

export interface TestApiOptions {
  clock?: Clock;
  plan?: PlanName;
  bodyLimitBytes?: number;
  jwtTtlSeconds?: number;
  rateLimitPerMinute?: number;
  logger?: Logger;
  proxy?: TestProxyOptions;
  /** Auth settings over TEST_AUTH's (failed-auth limit, registration). */
  auth?: Partial<AuthSettings>;
  publicUrl?: string | null;
  origins?: AppDeps['origins'];
  http?: AppDeps['http'];
  /** The MCP proxy's options. @default loopback and private servers allowed (the app listens on loopback) */
  mcp?: McpProxyOptions;
}

export async function startTestApi(backend: Backend, options: TestApiOptions = {}): Promise<TestApi> {
  const stores = await openTestStores(backend);
  const clock = options.clock ?? { now: () => new Date() };
  const plan = options.plan ?? 'scale';
  const firstWorkspace = await createWorkspace(stores.db, 'test', plan);
  const firstKey = await createApiKey(stores.db, firstWorkspace.id);
  const p = options.proxy;
  const providers = p
    ? createProviderRegistry(
        [
          { name: 'openai', type: 'openai', upstream: p.upstream },
          { name: 'anthropic', type: 'anthropic', upstream: p.upstream },
          { name: 'google', type: 'google', upstream: p.upstream },
          ...(p.providers ?? []),
        ],
        { headersTimeoutMs: p.headersTimeoutMs ?? 10_000, connectTimeoutMs: 2_000 },
      )
    : null;
  const app = await buildApp({
    db: stores.db,
    counters: stores.counters,
    clock,
    logger: options.logger ?? createLogger('silent'),
    version: 'test',
    schemaCompilers: SCHEMA_COMPILERS,
    bodyLimitBytes: options.bodyLimitBytes ?? 1024 * 1024,
    auth: {
      ...TEST_AUTH,
      jwtTtlSeconds: options.jwtTtlSeconds ?? TEST_AUTH.jwtTtlSeconds,
      rateLimitPerMinute: options.rateLimitPerMinute ?? TEST_AUTH.rateLimitPerMinute,
      ...options.auth,
    },
    ...(options.publicUrl !== undefined ? { publicUrl: options.publicUrl } : {}),
    ...(options.http ? { http: options.http } : {}),
    mcp: options.mcp ?? { policy: { allowPrivate: true, ownPort: null, subject: MCP_SUBJECT } },
    ...(options.origins ? { origins: options.origins } : {}),
    ...(p && providers
      ? {
          proxy: {
            providers,
            defaultApiKey: p.workspaceKeyAsDefault ? firstKey.apiKey : null,
            defaultUserId: p.defaultUserId ?? null,
            bodyLimitBytes: p.bodyLimitBytes ?? 1024 * 1024,
            ...(p.bodyBudgetBytes !== undefined ? { bodyBudgetBytes: p.bodyBudgetBytes } : {}),
            ...(p.audit ? { audit: p.audit } : {}),
            ...(p.webSocketIdleMs !== undefined ? { webSocketIdleMs: p.webSocketIdleMs } : {}),
          },
        }
      : {}),
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  const newWorkspace = async (wsPlan: PlanName = plan) => {
    const ws = await createWorkspace(stores.db, 'test', wsPlan);
    const key = await createApiKey(stores.db, ws.id);
    return { workspaceId: ws.id, apiKey: key.apiKey, api: caller(url, key.apiKey) };
  };
  const first = { workspaceId: firstWorkspace.id, apiKey: firstKey.apiKey, api: caller(url, firstKey.apiKey) };
  return {
    ...first.api,
    url,
    app,
    stores,
    workspaceId: first.workspaceId,
    apiKey: first.apiKey,
    newWorkspace,
    async setWorkspace(values, workspaceId = first.workspaceId) {
      const entries = Object.entries(values);
      const sets = entries.map(([k], i) => `${k} = $${i + 2}`).join(', ');
      await stores.db.query(`UPDATE workspaces SET ${sets} WHERE id = $1`, [workspaceId, ...entries.map(([, v]) => v)]);
    },
    async close() {
      await app.close();
      await providers?.close();
      await stores.close();
    },
  };
}

export interface ProxyTestApi extends TestApi {
  /** The fake provider that both built-in providers forward to. */
  upstream: FakeUpstream;
}

/** A test API with the proxy on, in front of a fake upstream of its own; `close` stops both. */
export async function startProxyTestApi(
  backend: Backend,
  options: Omit<TestApiOptions, 'proxy'> & {
    proxy?: Omit<TestProxyOptions, 'upstream'>;
    upstream?: FakeUpstreamOptions;
  } = {},
): Promise<ProxyTestApi> {
  const { upstream: upstreamOptions, proxy, ...apiOptions } = options;
  const upstream = await startFakeUpstream(upstreamOptions);
  try {
    const api = await startTestApi(backend, { ...apiOptions, proxy: { ...proxy, upstream: upstream.url } });
    return {
      ...api,
      upstream,
      async close() {
        await api.close();
        await upstream.close();
      },
    };
  } catch (error) {
    await upstream.close();
    throw error;
  }
}

export interface SecondApp {
  url: string;
  close(): Promise<void>;
}

/**
 * Another daemon on the first one's database, proxying OpenAI to the same upstream: what two
 * daemons behind one load balancer share (the records) and do not (pending spend, the process).
 * Its counters default to the first app's; give it counters of its own to share only what they store.
 */
export async function startSecondApp(
  first: ProxyTestApi,
  options: { counters?: CounterStore } = {},
): Promise<SecondApp> {
  const providers = createProviderRegistry([{ name: 'openai', type: 'openai', upstream: first.upstream.url }], {
    headersTimeoutMs: 10_000,
    connectTimeoutMs: 2_000,
  });
  try {
    const app = await buildApp({
      db: first.stores.db,
      counters: options.counters ?? first.stores.counters,
      clock: { now: () => new Date() },
      logger: createLogger('silent'),
      version: 'test',
      schemaCompilers: SCHEMA_COMPILERS,
      bodyLimitBytes: 1024 * 1024,
      auth: TEST_AUTH,
      proxy: { providers, defaultApiKey: null, defaultUserId: null, bodyLimitBytes: 1024 * 1024 },
    });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    return {
      url,
      async close() {
        await app.close();
        await providers.close();
      },
    };
  } catch (error) {
    await providers.close();
    throw error;
  }
}
