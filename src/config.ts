/**
 * Configuration: `config/default.json`, then an optional JSON file named by RUNGUARD_CONFIG, then
 * environment variables, then command-line flags. Validated once at start; a bad value stops
 * the daemon with a message that names the key. Only this module and the entry point read
 * `process.env`.
 */
import { readFileSync } from 'node:fs';
import { PLAN_NAMES, type PlanName } from './contract/usage.js';
import { isProviderType, type ProviderType } from './proxy/providers/index.js';

export interface Config {
  host: string;
  port: number;
  databaseUrl: string | null;
  redisUrl: string | null;
  dataDir: string;
  defaultPlan: PlanName;
  bodyLimitBytes: number;
  logLevel: string;
  dbPoolSize: number;
  redisCommandTimeoutMs: number;
  redisKeyPrefix: string;
  jwtSecret: string | null;
  jwtTtlSeconds: number;
  scryptCost: number;
  authRateLimitPerMinute: number;
  /** `auto`: pretty on a terminal, JSON otherwise. */
  logFormat: LogFormat;
  /** How long a stopping daemon lets in-flight requests and streams finish before cutting them. */
  shutdownGraceMs: number;
  /** A RUNNING run with no new step for this long is ended FAILED by the stale-run sweep. */
  staleRunIdleMs: number;
  /** How often the stale-run sweep runs; 0 turns it off. */
  staleRunSweepIntervalMs: number;
  /** Serve Prometheus metrics on `/metrics`. */
  metricsEnabled: boolean;
  /** How often the daemon checks its counters against the records and repairs drift; 0 turns it off. */
  reconcileIntervalMs: number;
  /** Upstream of the built-in `openai` provider. */
  openaiUpstream: string;
  /** Upstream of the built-in `anthropic` provider. */
  anthropicUpstream: string;
  /** More providers, by name: `{"ollama": {"type": "openai", "upstream": "http://127.0.0.1:11434/v1"}}`. */
  providers: Record<string, ProviderEntry>;
  /** The key the proxy uses when a call carries no `x-runguard-key` (loopback only); else `<dataDir>/api-key`. */
  proxyApiKey: string | null;
  /** The user of a run-less proxy call without `x-runguard-user-id`; null: the header is required. */
  proxyDefaultUserId: string | null;
  proxyBodyLimitBytes: number;
  proxyConnectTimeoutMs: number;
  /** Time to the upstream's response headers: model calls can think for minutes. */
  proxyHeadersTimeoutMs: number;
  /** Longest silence between two body chunks of the upstream. */
  proxyBodyTimeoutMs: number;
  proxyConnectionsPerUpstream: number;
  /** Bytes of proxied request bodies held at once across all calls; beyond it, 503 OVERLOADED. */
  proxyBodyBudgetBytes: number;
  /** Largest audit summary of a proxied request kept as the step's `input_data`. */
  proxyAuditMaxBytes: number;
  /** Keep an excerpt of the last message in the audit summary (off: prompts are not stored). */
  proxyAuditPrompts: boolean;
  /**
   * The daemon's address as its clients reach it (`https://guard.example.com`): proxy-token URLs
   * are built from it, never from a request's Host header. Null: the address it listens on.
   */
  publicUrl: string | null;
  /** Who may create accounts. Null: `open` on a loopback-only daemon, `closed` otherwise. */
  registration: Registration | null;
  /** Failed authentications per client address per minute before the address is answered 429. */
  authFailuresPerMinute: number;
  /** Time to receive a request whole (headers and body); a stalled upload is cut at it. */
  requestTimeoutMs: number;
  /** Time to receive a request's headers. */
  headersTimeoutMs: number;
  /** Open client connections at most; 0: derived from the process's open-file limit. */
  maxConnections: number;
  /** Webhooks may go to loopback, link-local and private addresses (never to this daemon's own port). */
  webhookAllowPrivate: boolean;
  /** Endpoints this daemon delivers to at once. */
  webhookConcurrency: number;
  /** One delivery attempt, connect to answer. */
  webhookTimeoutMs: number;
  /** How often this daemon looks for due deliveries; 0: it delivers none (others do). */
  webhookPollIntervalMs: number;
  /** The first retry's delay; each next doubles, with jitter, up to an hour, for up to 24 hours. */
  webhookRetryBaseMs: number;
  /** How often budget thresholds, denial windows and failed runs are scanned for. */
  webhookScanIntervalMs: number;
  /** Denials are told of once per subject and reason per window of this length. */
  webhookDenialWindowMs: number;
  /** Fractions of a daily budget whose crossing is told of (`budget.threshold`). */
  webhookBudgetThresholds: number[];
  /** Finished deliveries and their events are kept this many days. */
  webhookRetentionDays: number;
  /** How often this daemon beats its heartbeat in the database (it owns the proxied calls it forwards). */
  daemonHeartbeatIntervalMs: number;
  /** A daemon whose heartbeat is older than this is dead: its unfinished proxied calls are recovered. */
  daemonLeaseMs: number;
  /** How often this daemon looks for dead daemons' unfinished proxied calls; 0: only at its start. */
  resultRecoveryIntervalMs: number;
}

export const REGISTRATION_MODES = ['open', 'closed'] as const;
export type Registration = (typeof REGISTRATION_MODES)[number];

export interface ProviderEntry {
  type: ProviderType;
  upstream: string;
}

export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

type Parser<T> = (raw: unknown) => T;

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const text: Parser<string> = (raw) => {
  if (typeof raw !== 'string' || raw.length === 0) throw new Error('must be a non-empty string');
  return raw;
};
const optionalText: Parser<string | null> = (raw) => (raw === null || raw === '' ? null : text(raw));
const integer =
  (min: number, max: number): Parser<number> =>
  (raw) => {
    const n = typeof raw === 'string' && /^-?\d+$/.test(raw.trim()) ? Number(raw) : raw;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) {
      throw new Error(`must be an integer from ${min} to ${max}`);
    }
    return n;
  };
const oneOf =
  <T extends string>(values: readonly T[]): Parser<T> =>
  (raw) => {
    if (!values.includes(raw as T)) throw new Error(`must be one of ${values.join(', ')}`);
    return raw as T;
  };
const boolean: Parser<boolean> = (raw) => {
  if (typeof raw === 'boolean') return raw;
  if (typeof raw === 'string' && /^(true|1|yes|on)$/i.test(raw.trim())) return true;
  if (typeof raw === 'string' && /^(false|0|no|off)$/i.test(raw.trim())) return false;
  throw new Error('must be true or false');
};
const url =
  (protocols: string[]): Parser<string | null> =>
  (raw) => {
    const value = optionalText(raw);
    if (value === null) return null;
    let parsed: URL;
    try {
      parsed = new URL(value);
    } catch {
      throw new Error('must be a URL');
    }
    if (!protocols.includes(parsed.protocol)) throw new Error(`must be a ${protocols.join(' or ')} URL`);
    return value;
  };

const httpUrl: Parser<string> = (raw) => {
  const value = url(['http:', 'https:'])(raw);
  if (value === null) throw new Error('must be an http or https URL');
  const parsed = new URL(value);
  if (parsed.search || parsed.hash || parsed.username || parsed.password) {
    throw new Error('must be a base URL without query, fragment or credentials');
  }
  return value.replace(/\/+$/, '');
};
/** Names that would collide with the proxy's own path segments (`/proxy/runs/...`, `/proxy/t/...`). */
const RESERVED_PROVIDER_NAMES = new Set(['runs', 't', 'openai', 'anthropic']);
const providers: Parser<Record<string, ProviderEntry>> = (raw) => {
  const value = typeof raw === 'string' ? (JSON.parse(raw) as unknown) : (raw ?? {});
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new Error('must be an object of providers');
  const out: Record<string, ProviderEntry> = {};
  for (const [name, entry] of Object.entries(value as Record<string, unknown>)) {
    if (!/^[a-z0-9][a-z0-9_-]{0,62}$/.test(name))
      throw new Error(`has a bad provider name "${name}" (lowercase, digits, - and _)`);
    if (RESERVED_PROVIDER_NAMES.has(name)) throw new Error(`may not redefine "${name}" (reserved or built in)`);
    const e = entry as Record<string, unknown> | null;
    if (!e || !isProviderType(e.type)) throw new Error(`provider "${name}" needs a type: openai or anthropic`);
    try {
      out[name] = { type: e.type, upstream: httpUrl(e.upstream) };
    } catch (error) {
      throw new Error(`provider "${name}" upstream ${(error as Error).message}`, { cause: error });
    }
  }
  return out;
};

/** Fractions, from a JSON array or `0.5,0.8,1`: each above 0 and at most 10, at most 20 of them. */
const fractions: Parser<number[]> = (raw) => {
  const list =
    typeof raw === 'string'
      ? raw
          .split(',')
          .filter((s) => s.trim() !== '')
          .map((s) => Number(s.trim()))
      : raw;
  if (
    !Array.isArray(list) ||
    list.length > 20 ||
    !list.every((n) => typeof n === 'number' && Number.isFinite(n) && n > 0 && n <= 10)
  ) {
    throw new Error('must be a list of fractions above 0 and at most 10 (e.g. 0.5,0.8,1)');
  }
  return [...new Set(list as number[])].sort((x, y) => x - y);
};

/** Keys whose values may carry credentials (a URL's password, a secret, a key). */
const SECRET_KEYS = new Set<keyof Config>(['databaseUrl', 'redisUrl', 'jwtSecret', 'proxyApiKey']);

/** Every key: its parser and the environment variable that overrides it. */
const SCHEMA: { [K in keyof Config]: { env: string; parse: Parser<Config[K]> } } = {
  host: { env: 'HOST', parse: text },
  port: { env: 'PORT', parse: integer(0, 65_535) },
  databaseUrl: { env: 'DATABASE_URL', parse: url(['postgres:', 'postgresql:']) },
  redisUrl: { env: 'REDIS_URL', parse: url(['redis:', 'rediss:']) },
  dataDir: { env: 'RUNGUARD_DATA_DIR', parse: text },
  defaultPlan: { env: 'RUNGUARD_DEFAULT_PLAN', parse: oneOf(PLAN_NAMES) },
  bodyLimitBytes: { env: 'RUNGUARD_BODY_LIMIT_BYTES', parse: integer(1_024, 64 * 1024 * 1024) },
  logLevel: { env: 'RUNGUARD_LOG_LEVEL', parse: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) },
  dbPoolSize: { env: 'RUNGUARD_DB_POOL_SIZE', parse: integer(1, 200) },
  redisCommandTimeoutMs: { env: 'RUNGUARD_REDIS_COMMAND_TIMEOUT_MS', parse: integer(10, 60_000) },
  redisKeyPrefix: { env: 'RUNGUARD_REDIS_KEY_PREFIX', parse: text },
  jwtSecret: {
    env: 'RUNGUARD_JWT_SECRET',
    parse: (raw) => {
      const value = optionalText(raw);
      if (value !== null && value.length < 32) throw new Error('must be at least 32 characters');
      return value;
    },
  },
  jwtTtlSeconds: { env: 'RUNGUARD_JWT_TTL_SECONDS', parse: integer(60, 30 * 24 * 3600) },
  scryptCost: {
    env: 'RUNGUARD_SCRYPT_COST',
    parse: (raw) => {
      const n = integer(1_024, 2 ** 20)(raw);
      if ((n & (n - 1)) !== 0) throw new Error('must be a power of two');
      return n;
    },
  },
  authRateLimitPerMinute: { env: 'RUNGUARD_AUTH_RATE_LIMIT_PER_MINUTE', parse: integer(1, 100_000) },
  logFormat: { env: 'RUNGUARD_LOG_FORMAT', parse: oneOf(LOG_FORMATS) },
  shutdownGraceMs: { env: 'RUNGUARD_SHUTDOWN_GRACE_MS', parse: integer(0, 10 * 60_000) },
  staleRunIdleMs: { env: 'RUNGUARD_STALE_RUN_IDLE_MS', parse: integer(1_000, 30 * 24 * 3_600_000) },
  staleRunSweepIntervalMs: { env: 'RUNGUARD_STALE_RUN_SWEEP_INTERVAL_MS', parse: integer(0, 24 * 3_600_000) },
  reconcileIntervalMs: { env: 'RUNGUARD_RECONCILE_INTERVAL_MS', parse: integer(0, 24 * 3600_000) },
  metricsEnabled: { env: 'RUNGUARD_METRICS_ENABLED', parse: boolean },
  openaiUpstream: { env: 'RUNGUARD_OPENAI_UPSTREAM', parse: httpUrl },
  anthropicUpstream: { env: 'RUNGUARD_ANTHROPIC_UPSTREAM', parse: httpUrl },
  providers: { env: 'RUNGUARD_PROVIDERS', parse: providers },
  proxyApiKey: { env: 'RUNGUARD_API_KEY', parse: optionalText },
  proxyDefaultUserId: { env: 'RUNGUARD_PROXY_DEFAULT_USER_ID', parse: optionalText },
  proxyBodyLimitBytes: { env: 'RUNGUARD_PROXY_BODY_LIMIT_BYTES', parse: integer(1_024, 256 * 1024 * 1024) },
  proxyConnectTimeoutMs: { env: 'RUNGUARD_PROXY_CONNECT_TIMEOUT_MS', parse: integer(100, 600_000) },
  proxyHeadersTimeoutMs: { env: 'RUNGUARD_PROXY_HEADERS_TIMEOUT_MS', parse: integer(100, 3_600_000) },
  proxyBodyTimeoutMs: { env: 'RUNGUARD_PROXY_BODY_TIMEOUT_MS', parse: integer(100, 3_600_000) },
  proxyConnectionsPerUpstream: { env: 'RUNGUARD_PROXY_CONNECTIONS_PER_UPSTREAM', parse: integer(1, 10_000) },
  proxyAuditMaxBytes: { env: 'RUNGUARD_PROXY_AUDIT_MAX_BYTES', parse: integer(256, 1024 * 1024) },
  proxyAuditPrompts: { env: 'RUNGUARD_PROXY_AUDIT_PROMPTS', parse: boolean },
  proxyBodyBudgetBytes: { env: 'RUNGUARD_PROXY_BODY_BUDGET_BYTES', parse: integer(1_024, 16 * 1024 * 1024 * 1024) },
  publicUrl: { env: 'RUNGUARD_PUBLIC_URL', parse: (raw) => (optionalText(raw) === null ? null : httpUrl(raw)) },
  registration: {
    env: 'RUNGUARD_REGISTRATION',
    parse: (raw) => (optionalText(raw) === null ? null : oneOf(REGISTRATION_MODES)(raw)),
  },
  authFailuresPerMinute: { env: 'RUNGUARD_AUTH_FAILURES_PER_MINUTE', parse: integer(1, 1_000_000) },
  requestTimeoutMs: { env: 'RUNGUARD_REQUEST_TIMEOUT_MS', parse: integer(1_000, 3_600_000) },
  headersTimeoutMs: { env: 'RUNGUARD_HEADERS_TIMEOUT_MS', parse: integer(1_000, 600_000) },
  maxConnections: { env: 'RUNGUARD_MAX_CONNECTIONS', parse: integer(0, 1_000_000) },
  webhookAllowPrivate: { env: 'RUNGUARD_WEBHOOK_ALLOW_PRIVATE', parse: boolean },
  webhookConcurrency: { env: 'RUNGUARD_WEBHOOK_CONCURRENCY', parse: integer(1, 1_000) },
  webhookTimeoutMs: { env: 'RUNGUARD_WEBHOOK_TIMEOUT_MS', parse: integer(100, 120_000) },
  webhookPollIntervalMs: { env: 'RUNGUARD_WEBHOOK_POLL_INTERVAL_MS', parse: integer(0, 60_000) },
  webhookRetryBaseMs: { env: 'RUNGUARD_WEBHOOK_RETRY_BASE_MS', parse: integer(10, 3_600_000) },
  webhookScanIntervalMs: { env: 'RUNGUARD_WEBHOOK_SCAN_INTERVAL_MS', parse: integer(100, 3_600_000) },
  webhookDenialWindowMs: { env: 'RUNGUARD_WEBHOOK_DENIAL_WINDOW_MS', parse: integer(1_000, 86_400_000) },
  webhookBudgetThresholds: { env: 'RUNGUARD_WEBHOOK_BUDGET_THRESHOLDS', parse: fractions },
  webhookRetentionDays: { env: 'RUNGUARD_WEBHOOK_RETENTION_DAYS', parse: integer(1, 3_650) },
  daemonHeartbeatIntervalMs: { env: 'RUNGUARD_DAEMON_HEARTBEAT_INTERVAL_MS', parse: integer(50, 60_000) },
  daemonLeaseMs: { env: 'RUNGUARD_DAEMON_LEASE_MS', parse: integer(200, 600_000) },
  resultRecoveryIntervalMs: { env: 'RUNGUARD_RESULT_RECOVERY_INTERVAL_MS', parse: integer(0, 600_000) },
};

function readJson(path: string | URL, label: string): Record<string, unknown> {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch (error) {
    throw new ConfigError(`Cannot read ${label}: ${(error as Error).message}`);
  }
}

export function loadConfig(
  env: NodeJS.ProcessEnv = process.env,
  flags: Partial<Record<keyof Config, unknown>> = {},
): Config {
  const defaults = readJson(new URL('../config/default.json', import.meta.url), 'config/default.json');
  const file = env.RUNGUARD_CONFIG ? readJson(env.RUNGUARD_CONFIG, env.RUNGUARD_CONFIG) : {};
  for (const key of Object.keys(file)) {
    if (!(key in SCHEMA)) throw new ConfigError(`Unknown configuration key "${key}" in ${env.RUNGUARD_CONFIG}`);
  }
  const config = {} as Record<string, unknown>;
  for (const [key, { env: name, parse }] of Object.entries(SCHEMA) as [keyof Config, (typeof SCHEMA)[keyof Config]][]) {
    let raw: unknown = defaults[key];
    let source = `"${key}" in config/default.json`;
    if (key in file) [raw, source] = [file[key], `"${key}" in ${env.RUNGUARD_CONFIG}`];
    if (env[name] !== undefined) [raw, source] = [env[name], `environment variable ${name}`];
    if (flags[key] !== undefined)
      [raw, source] = [flags[key], `option --${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`];
    try {
      config[key] = parse(raw);
    } catch (error) {
      // Start-up errors reach the log pipeline: a value that may hold a password or a key is not echoed.
      const got = SECRET_KEYS.has(key) ? `a value of ${String(raw).length} characters, not shown` : JSON.stringify(raw);
      throw new ConfigError(`Invalid configuration: ${source} ${(error as Error).message} (got ${got})`);
    }
  }
  // Node refuses a headers timeout longer than the request's: say so by name rather than crash at listen.
  if ((config.headersTimeoutMs as number) > (config.requestTimeoutMs as number)) {
    throw new ConfigError(
      `Invalid configuration: "headersTimeoutMs" (${String(config.headersTimeoutMs)}) may not exceed "requestTimeoutMs" (${String(config.requestTimeoutMs)})`,
    );
  }
  // A lease shorter than two heartbeats would find a live daemon dead at its first late beat.
  if ((config.daemonLeaseMs as number) < 2 * (config.daemonHeartbeatIntervalMs as number)) {
    throw new ConfigError(
      `Invalid configuration: "daemonLeaseMs" (${String(config.daemonLeaseMs)}) must be at least twice "daemonHeartbeatIntervalMs" (${String(config.daemonHeartbeatIntervalMs)})`,
    );
  }
  return Object.freeze(config) as unknown as Config;
}
