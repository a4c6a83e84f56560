/**
 * Every setting of the daemon, declared once: its name, environment variable, type, default,
 * bounds and one line of description. The `Config` type, the defaults, validation (src/config.ts)
 * and docs/configuration.md all come from this declaration; `npm run docs:config` writes it as JSON
 * to config/settings.schema.json, which the loader reads, and a test fails when that is stale.
 * The kinds of setting are in src/setting-kinds.ts, what each accepts in src/setting-formats.ts.
 */
import { Type, type Static } from './contract/typebox.js';
import type { FormatName } from './setting-formats.js';
import { flag, integer, oneOf, optional, text, url } from './setting-kinds.js';
import { PLAN_NAMES } from './contract/usage.js';
import { PROVIDER_TYPES } from './proxy/providers/index.js';

export const REGISTRATION_MODES = ['open', 'closed'] as const;
export type Registration = (typeof REGISTRATION_MODES)[number];
export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

const PROVIDER_NAME = '^(?!(?:runs|t|openai|anthropic|google)$)[a-z0-9][a-z0-9_-]{0,62}$';

// --- The settings, by topic ---------------------------------------------------------------------

const server = {
  host: text('HOST', '127.0.0.1', 'address to bind'),
  port: integer('PORT', 8787, [0, 65_535], 'port to listen on (0: any free port)'),
  publicUrl: optional(
    Type.String({ format: 'http-base-url' }),
    'RUNGUARD_PUBLIC_URL',
    "the address agents reach the daemon at; proxy-token URLs are built from it, never from a request's Host header (unset: the listen address)",
  ),
  allowedHosts: Type.Array(Type.String({ pattern: '^[A-Za-z0-9.-]{1,253}$|^\\[[0-9A-Fa-f:.]+\\]$' }), {
    env: 'RUNGUARD_ALLOWED_HOSTS',
    default: [],
    maxItems: 100,
    accepts: 'a list of host names (e.g. runguard.internal,guard.example.com)',
    description:
      "host names the daemon answers to besides loopback ones, the address a client connected to and `publicUrl`'s host; a request for any other gets 421 (the defence against DNS rebinding)",
  }),
  allowedOrigins: Type.Array(Type.String({ format: 'web-origin' satisfies FormatName }), {
    env: 'RUNGUARD_ALLOWED_ORIGINS',
    default: [],
    maxItems: 100,
    accepts: 'a list of origins (e.g. https://tools.example.com)',
    description:
      "web origins besides the daemon's own whose pages may call the API and the proxy from a browser; any other site's request gets 403 (the daemon sends no CORS headers)",
  }),
  dataDir: text(
    'RUNGUARD_DATA_DIR',
    '.runguard',
    'the embedded database, the API key file and `daemon.json` (where the CLI finds the daemon)',
  ),
  defaultPlan: oneOf('RUNGUARD_DEFAULT_PLAN', PLAN_NAMES, 'scale', 'plan of the workspace created on first start'),
  registration: optional(
    Type.Enum(REGISTRATION_MODES),
    'RUNGUARD_REGISTRATION',
    'whether `POST /v1/auth/register` may create workspaces (unset: `open` on a loopback-only daemon, `closed` otherwise)',
  ),
  bodyLimitBytes: integer(
    'RUNGUARD_BODY_LIMIT_BYTES',
    1_048_576,
    [1_024, 64 * 1024 * 1024],
    'larger API request bodies get 413',
  ),
  requestTimeoutMs: integer(
    'RUNGUARD_REQUEST_TIMEOUT_MS',
    120_000,
    [1_000, 3_600_000],
    'a request whose body has not arrived in this time gets 408',
  ),
  headersTimeoutMs: integer(
    'RUNGUARD_HEADERS_TIMEOUT_MS',
    30_000,
    [1_000, 600_000],
    'a request whose headers have not arrived in this time gets 408 (at most `requestTimeoutMs`)',
  ),
  maxConnections: integer(
    'RUNGUARD_MAX_CONNECTIONS',
    0,
    [0, 1_000_000],
    "open client connections at once, past it the oldest idle one is closed (0: from the process's open-file limit)",
  ),
  shutdownGraceMs: integer(
    'RUNGUARD_SHUTDOWN_GRACE_MS',
    10_000,
    [0, 10 * 60_000],
    'how long a stopping daemon lets in-flight requests and streams finish before cutting them',
  ),
  shutdownAfterGraceMs: integer(
    'RUNGUARD_SHUTDOWN_AFTER_GRACE_MS',
    10_000,
    [0, 10 * 60_000],
    'how long a stopping daemon may take past its grace for its last writes and closing its pools; past it (a database that stopped answering), it exits with status 1',
  ),
};

const storage = {
  databaseUrl: optional(
    Type.String({ format: 'postgres-url' }),
    'DATABASE_URL',
    'PostgreSQL URL (unset: an embedded PostgreSQL, PGlite, in the data directory)',
    { secret: true },
  ),
  dbPoolSize: integer('RUNGUARD_DB_POOL_SIZE', 10, [1, 200], 'PostgreSQL connections per daemon'),
  redisUrl: optional(
    Type.String({ format: 'redis-url' }),
    'REDIS_URL',
    'Redis URL for the hot counters (unset: the counters live in the database)',
    { secret: true },
  ),
  redisCommandTimeoutMs: integer(
    'RUNGUARD_REDIS_COMMAND_TIMEOUT_MS',
    1_000,
    [10, 60_000],
    'a Redis command slower than this fails',
  ),
  redisKeyPrefix: text('RUNGUARD_REDIS_KEY_PREFIX', 'rg:', 'prefix of every Redis key'),
};

const logs = {
  logLevel: oneOf('RUNGUARD_LOG_LEVEL', LOG_LEVELS, 'info', 'the log level (pino)'),
  logFormat: oneOf(
    'RUNGUARD_LOG_FORMAT',
    LOG_FORMATS,
    'auto',
    'log lines as JSON, pretty, or `auto`: pretty on a terminal',
  ),
  metricsEnabled: flag('RUNGUARD_METRICS_ENABLED', true, 'serve Prometheus metrics at `/metrics`'),
};

const accounts = {
  jwtSecret: optional(
    Type.String({ minLength: 32 }),
    'RUNGUARD_JWT_SECRET',
    'HS256 secret of dashboard tokens (unset: generated once and kept in the database)',
    { secret: true },
  ),
  jwtTtlSeconds: integer('RUNGUARD_JWT_TTL_SECONDS', 86_400, [60, 30 * 24 * 3600], 'dashboard token lifetime'),
  scryptCost: Type.Integer({
    env: 'RUNGUARD_SCRYPT_COST',
    default: 131_072,
    minimum: 1_024,
    maximum: 2 ** 20,
    format: 'power-of-two' satisfies FormatName,
    description: 'scrypt cost (N) of password hashes',
  }),
  authRateLimitPerMinute: integer(
    'RUNGUARD_AUTH_RATE_LIMIT_PER_MINUTE',
    10,
    [1, 100_000],
    'login and register attempts per client address a minute',
  ),
  authFailuresPerMinute: integer(
    'RUNGUARD_AUTH_FAILURES_PER_MINUTE',
    60,
    [1, 1_000_000],
    'failed authentications per client address a minute, on every route, before it gets 429',
  ),
};

const ProviderEntry = Type.Object(
  { type: Type.Enum(PROVIDER_TYPES), upstream: Type.String({ format: 'http-base-url' }) },
  { additionalProperties: false },
);
export type ProviderEntry = Static<typeof ProviderEntry>;

const proxy = {
  openaiUpstream: url(
    'RUNGUARD_OPENAI_UPSTREAM',
    'https://api.openai.com',
    'where the built-in `openai` provider forwards (an OpenAI-compatible base URL; `/v1` is added when it has no path)',
  ),
  anthropicUpstream: url(
    'RUNGUARD_ANTHROPIC_UPSTREAM',
    'https://api.anthropic.com',
    'where the built-in `anthropic` provider forwards',
  ),
  googleUpstream: url(
    'RUNGUARD_GOOGLE_UPSTREAM',
    'https://generativelanguage.googleapis.com',
    "where the built-in `google` provider forwards (Gemini's own API: `/v1beta/models/{model}:generateContent`, ...)",
  ),
  providers: Type.Record(Type.String({ pattern: PROVIDER_NAME }), ProviderEntry, {
    env: 'RUNGUARD_PROVIDERS',
    default: {},
    additionalProperties: false,
    accepts:
      'a JSON object of providers by name, each `{"type": "openai", "anthropic" or "google", "upstream": "<base URL>"}`; names of lowercase letters, digits, - and _, not runs, t, openai, anthropic or google',
    description:
      'more providers by name (`{"ollama": {"type": "openai", "upstream": "http://127.0.0.1:11434/v1"}}`), proxied at `/proxy/.../<name>/...` and given to `exec`\'s command',
  }),
  proxyApiKey: optional(
    Type.String({ minLength: 1 }),
    'RUNGUARD_API_KEY',
    "the key the proxy uses for a loopback call without `x-runguard-key`; also the CLI's and the SDK's key (unset: `<dataDir>/api-key`)",
    { secret: true },
  ),
  proxyDefaultUserId: optional(
    Type.String({ minLength: 1 }),
    'RUNGUARD_PROXY_DEFAULT_USER_ID',
    'the user of a proxy call outside a run without `x-runguard-user-id` (unset: the header is required)',
  ),
  proxyBodyLimitBytes: integer(
    'RUNGUARD_PROXY_BODY_LIMIT_BYTES',
    33_554_432,
    [1_024, 256 * 1024 * 1024],
    'largest proxied request body',
  ),
  proxyConnectTimeoutMs: integer(
    'RUNGUARD_PROXY_CONNECT_TIMEOUT_MS',
    10_000,
    [100, 600_000],
    'connecting to an upstream',
  ),
  proxyHeadersTimeoutMs: integer(
    'RUNGUARD_PROXY_HEADERS_TIMEOUT_MS',
    600_000,
    [100, 3_600_000],
    "time to an upstream's response headers (models can think for minutes)",
  ),
  proxyBodyTimeoutMs: integer(
    'RUNGUARD_PROXY_BODY_TIMEOUT_MS',
    300_000,
    [100, 3_600_000],
    "longest silence between two chunks of an upstream's body",
  ),
  proxyConnectionsPerUpstream: integer(
    'RUNGUARD_PROXY_CONNECTIONS_PER_UPSTREAM',
    256,
    [1, 10_000],
    'connection pool per upstream',
  ),
  proxyBodyBudgetBytes: integer(
    'RUNGUARD_PROXY_BODY_BUDGET_BYTES',
    134_217_728,
    [1_024, 16 * 1024 * 1024 * 1024],
    'request bytes all proxied calls may hold at once; past it, 503 `OVERLOADED`',
  ),
  proxyAuditMaxBytes: integer(
    'RUNGUARD_PROXY_AUDIT_MAX_BYTES',
    2_048,
    [256, 1024 * 1024],
    "largest audit summary of a proxied request kept as the step's `input_data`",
  ),
  proxyAuditPrompts: flag(
    'RUNGUARD_PROXY_AUDIT_PROMPTS',
    false,
    'keep an excerpt of the last message in that summary (off: prompts are not stored)',
  ),
  mcpAllowPrivate: flag(
    'RUNGUARD_MCP_ALLOW_PRIVATE',
    false,
    'let MCP servers be on loopback, link-local and private addresses when the daemon listens beyond loopback (a loopback-only daemon always may)',
  ),
};

const background = {
  staleRunIdleMs: integer(
    'RUNGUARD_STALE_RUN_IDLE_MS',
    3_600_000,
    [1_000, 30 * 24 * 3_600_000],
    'a RUNNING run without a new step this long is ended FAILED',
  ),
  staleRunSweepIntervalMs: integer(
    'RUNGUARD_STALE_RUN_SWEEP_INTERVAL_MS',
    60_000,
    [0, 24 * 3_600_000],
    'how often that sweep runs (0: never)',
  ),
  reconcileIntervalMs: integer(
    'RUNGUARD_RECONCILE_INTERVAL_MS',
    600_000,
    [0, 24 * 3_600_000],
    'how often the counters are checked against the records and repaired (0: never)',
  ),
  daemonHeartbeatIntervalMs: integer(
    'RUNGUARD_DAEMON_HEARTBEAT_INTERVAL_MS',
    5_000,
    [50, 60_000],
    'how often a daemon writes its heartbeat in the database (it owns the proxied calls it forwards)',
  ),
  daemonLeaseMs: integer(
    'RUNGUARD_DAEMON_LEASE_MS',
    30_000,
    [200, 600_000],
    'a daemon whose heartbeat is older is dead and its unfinished proxied calls are recovered (at least twice the heartbeat)',
  ),
  resultRecoveryIntervalMs: integer(
    'RUNGUARD_RESULT_RECOVERY_INTERVAL_MS',
    5_000,
    [0, 600_000],
    "how often a daemon looks for dead daemons' unfinished calls (0: only at its start)",
  ),
};

const webhooks = {
  webhookAllowPrivate: flag(
    'RUNGUARD_WEBHOOK_ALLOW_PRIVATE',
    false,
    "let webhooks reach loopback, link-local and private addresses (never this daemon's own port)",
  ),
  webhookConcurrency: integer(
    'RUNGUARD_WEBHOOK_CONCURRENCY',
    8,
    [1, 1_000],
    'webhook endpoints a daemon delivers to at once',
  ),
  webhookTimeoutMs: integer(
    'RUNGUARD_WEBHOOK_TIMEOUT_MS',
    10_000,
    [100, 120_000],
    'one delivery attempt, connect to answer',
  ),
  webhookPollIntervalMs: integer(
    'RUNGUARD_WEBHOOK_POLL_INTERVAL_MS',
    1_000,
    [0, 60_000],
    'how often a daemon looks for deliveries due (0: it delivers none, others do)',
  ),
  webhookRetryBaseMs: integer(
    'RUNGUARD_WEBHOOK_RETRY_BASE_MS',
    5_000,
    [10, 3_600_000],
    "the first retry's delay; each next doubles, with jitter, up to an hour, for up to 24 hours",
  ),
  webhookScanIntervalMs: integer(
    'RUNGUARD_WEBHOOK_SCAN_INTERVAL_MS',
    5_000,
    [100, 3_600_000],
    'how often budget thresholds, denials and failed runs are scanned for events',
  ),
  webhookDenialWindowMs: integer(
    'RUNGUARD_WEBHOOK_DENIAL_WINDOW_MS',
    300_000,
    [1_000, 86_400_000],
    'denials are sent as one counted event per subject and reason per window of this length',
  ),
  webhookDenialSettleMs: integer(
    'RUNGUARD_WEBHOOK_DENIAL_SETTLE_MS',
    10_000,
    [0, 600_000],
    "a denial window is counted this long after it ends, for denials still committing (one committed later is left out of its window's count)",
  ),
  webhookBudgetThresholds: Type.Array(Type.Number({ exclusiveMinimum: 0, maximum: 10 }), {
    env: 'RUNGUARD_WEBHOOK_BUDGET_THRESHOLDS',
    default: [0.5, 0.8, 1],
    maxItems: 20,
    accepts: 'a list of fractions above 0 and at most 10, at most 20 of them (e.g. 0.5,0.8,1)',
    description: 'fractions of a budget (daily or of /v1/budgets) whose crossing fires `budget.threshold`',
  }),
  webhookRetentionDays: integer(
    'RUNGUARD_WEBHOOK_RETENTION_DAYS',
    30,
    [1, 3_650],
    'how many days finished deliveries and their events are kept',
  ),
};

/** The settings by topic, in the order the documentation lists them. */
export const SETTING_TOPICS = [
  { title: 'Server', settings: server },
  { title: 'Storage', settings: storage },
  { title: 'Logs and metrics', settings: logs },
  { title: 'Accounts and sign-in', settings: accounts },
  { title: 'Proxy', settings: proxy },
  { title: 'Background work', settings: background },
  { title: 'Webhooks', settings: webhooks },
] as const;

export const Settings = Type.Object(
  { ...server, ...storage, ...logs, ...accounts, ...proxy, ...background, ...webhooks },
  { additionalProperties: false },
);

export type Config = Static<typeof Settings>;
export type SettingName = keyof Config;
