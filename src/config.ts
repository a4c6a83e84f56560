/**
 * Configuration: `config/default.json`, then an optional JSON file named by RUNGUARD_CONFIG, then
 * environment variables, then command-line flags. Validated once at start; a bad value stops
 * the daemon with a message that names the key. Only this module and the entry point read
 * `process.env`.
 */
import { readFileSync } from 'node:fs';
import { PLAN_NAMES, type Plan } from './store/workspaces.js';

export interface Config {
  host: string;
  port: number;
  databaseUrl: string | null;
  redisUrl: string | null;
  dataDir: string;
  defaultPlan: Plan;
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
const integer = (min: number, max: number): Parser<number> => (raw) => {
  const n = typeof raw === 'string' && /^-?\d+$/.test(raw.trim()) ? Number(raw) : raw;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) {
    throw new Error(`must be an integer from ${min} to ${max}`);
  }
  return n;
};
const oneOf = <T extends string>(values: readonly T[]): Parser<T> => (raw) => {
  if (!values.includes(raw as T)) throw new Error(`must be one of ${values.join(', ')}`);
  return raw as T;
};
const boolean: Parser<boolean> = (raw) => {
  if (typeof raw === 'boolean') return raw;
  if (typeof raw === 'string' && /^(true|1|yes|on)$/i.test(raw.trim())) return true;
  if (typeof raw === 'string' && /^(false|0|no|off)$/i.test(raw.trim())) return false;
  throw new Error('must be true or false');
};
const url = (protocols: string[]): Parser<string | null> => (raw) => {
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
    if (flags[key] !== undefined) [raw, source] = [flags[key], `option --${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`];
    try {
      config[key] = parse(raw);
    } catch (error) {
      throw new ConfigError(`Invalid configuration: ${source} ${(error as Error).message} (got ${JSON.stringify(raw)})`);
    }
  }
  return Object.freeze(config) as unknown as Config;
}
