/**
 * pino, with every credential-bearing field redacted wherever it turns up in a log line, and
 * request URLs stripped of the run-scoped proxy tokens and keys they may carry (`loggedUrl`).
 */
import { createRequire } from 'node:module';
import type { FastifyBaseLogger } from 'fastify';
import { pino, type Bindings, type ChildLoggerOptions, type Logger, type LoggerOptions } from 'pino';
import type pinoPretty from 'pino-pretty';

// pino-pretty and its dependencies are only loaded for a readable log: a daemon logging JSON
// (a container, a service manager) never pays their memory. `createRequire` keeps
// `createLogger` synchronous.
const require = createRequire(import.meta.url);

export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'req.headers["x-runguard-key"]',
  'headers.authorization',
  'headers["x-api-key"]',
  'headers["x-runguard-key"]',
  'password',
  '*.password',
  'apiKey',
  '*.apiKey',
  'api_key',
  '*.api_key',
  'access_token',
  '*.access_token',
];

const CENSOR = '[redacted]';

/** Query parameters named like a credential: their values are never logged. */
const CREDENTIAL_PARAM = /^(?:api[_-]?key|key|token|access[_-]?token|auth|authorization|password|secret)$/i;
/** A runguard API key (`lg_...`) or a run's proxy token (`rgp_...`), anywhere in a text. */
const RUNGUARD_CREDENTIAL = /(?:^|[^a-z0-9])(?:lg|rgp)_/i;

/** `text` percent-decoded until it no longer changes (at most 3 times); as far as it decodes. */
function decodedText(text: string): string {
  let out = text;
  for (let i = 0; i < 3; i++) {
    let next: string;
    try {
      next = decodeURIComponent(out.replace(/\+/g, ' '));
    } catch {
      break;
    }
    if (next === out) break;
    out = next;
  }
  return out;
}

/** Whether a URL's segment or query value holds a runguard key or proxy token, however it is encoded. */
export function holdsRunguardCredential(text: string): boolean {
  return RUNGUARD_CREDENTIAL.test(decodedText(text));
}

const censoredSegments = (path: string) =>
  path
    .split('/')
    .map((segment) => (holdsRunguardCredential(segment) ? CENSOR : segment))
    .join('/');

/** A query string (no `?`) with every credential-named parameter's value, and every runguard credential, censored. */
function censoredQuery(query: string): string {
  return query
    .split('&')
    .map((pair) => {
      const at = pair.indexOf('=');
      const name = at === -1 ? pair : pair.slice(0, at);
      if (holdsRunguardCredential(name)) return CENSOR;
      if (at === -1) return pair;
      const hidden = CREDENTIAL_PARAM.test(decodedText(name)) || holdsRunguardCredential(pair.slice(at + 1));
      return hidden ? `${name}=${CENSOR}` : pair;
    })
    .join('&');
}

/** What of a request a log line may see: its URL as sent, and how its route parsed it. */
export interface LoggedRequest {
  url?: string;
  params?: unknown;
}

/**
 * What of a request's URL a log line may show: the one place URLs are redacted, for every log line.
 *
 * A proxy URL can carry a run's token (`/proxy/t/<token>/...`), a bearer credential by itself, and
 * the router accepts it spelled other ways (`/proxy/%74/<token>/...`). So a proxy path is never
 * shown as sent: only as its route parsed it (the token replaced, the query string dropped, as a
 * gateway's key may ride there), and a proxy path no route parsed shows nothing past `/proxy/`.
 * Elsewhere, a path segment or query value that holds a runguard key or token, and the value of a
 * query parameter named like a credential, are censored.
 */
export function loggedUrl(request: LoggedRequest): string {
  // An absolute-form target (`POST http://host/proxy/...`) is routed by its path.
  const url = (request.url ?? '').replace(/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i, '');
  const queryAt = url.indexOf('?');
  const path = queryAt === -1 ? url : url.slice(0, queryAt);
  const normalized = decodedText(path)
    .toLowerCase()
    .replace(/\/{2,}/g, '/');
  if (normalized === '/proxy' || normalized.startsWith('/proxy/')) return parsedProxyPath(request.params);
  const shown = censoredSegments(path);
  return queryAt === -1 ? shown : `${shown}?${censoredQuery(url.slice(queryAt + 1))}`;
}

/** A proxy route's path as parsed: `/proxy/[t/[redacted]|runs/<run>]/<provider>/<path>` (or `mcp/<server>`). */
function parsedProxyPath(params: unknown): string {
  const parsed = (typeof params === 'object' && params !== null ? params : {}) as Record<string, unknown>;
  const { provider, token, run_id: runId } = parsed;
  const rest = parsed['*'];
  const run = typeof token === 'string' ? `t/${CENSOR}/` : typeof runId === 'string' ? `runs/${runId}/` : '';
  // An MCP route (`/proxy/.../mcp/:server`) has a server where a model call has a provider and path.
  if (typeof parsed.server === 'string') return censoredSegments(`/proxy/${run}mcp/${parsed.server}`);
  if (typeof provider !== 'string' || typeof rest !== 'string') return `/proxy/${CENSOR}`;
  return censoredSegments(`/proxy/${run}${provider}/${rest}`);
}

interface RequestLike extends LoggedRequest {
  method?: string;
  host?: string;
  hostname?: string;
  ip?: string;
  headers?: Record<string, unknown>;
  socket?: { remotePort?: number; remoteAddress?: string };
}

/** Fastify's request serializer: never a header, the URL as `loggedUrl` shows it. */
function serializeRequest(req: RequestLike) {
  return {
    method: req.method,
    url: loggedUrl(req),
    host: req.host ?? req.hostname,
    remoteAddress: req.ip ?? req.socket?.remoteAddress,
    remotePort: req.socket?.remotePort,
  };
}

/**
 * Requests whose info line is their proxied call's (written when its step is recorded): their
 * response is logged at `debug` only.
 */
export const loggedAsCall = new WeakSet<object>();

/** What the guard or the proxy decided of a refused request, for its line: `DENIED` and the rule's reason, say. */
export const requestOutcomes = new WeakMap<object, { decision: string; reason: string }>();

export type LogFormat = 'auto' | 'json' | 'pretty';

export interface LoggerSettings {
  /** `auto`: readable on a terminal, JSON lines otherwise. @default 'auto' */
  format?: LogFormat;
  /** Where lines go. @default process.stdout */
  destination?: NodeJS.WritableStream;
}

export function createLogger(level: string, settings: NodeJS.WritableStream | LoggerSettings = {}): Logger {
  const { format = 'auto', destination } = isStream(settings) ? { destination: settings } : settings;
  const options: LoggerOptions = {
    level,
    redact: { paths: REDACTED_PATHS, censor: CENSOR },
    serializers: { req: serializeRequest, err: pino.stdSerializers.err },
  };
  const out = destination ?? process.stdout;
  const readable = format === 'pretty' || (format === 'auto' && (out as { isTTY?: boolean }).isTTY === true);
  if (readable) {
    // In this thread, not a transport worker: lines are written in order and none are lost on exit.
    const pretty = require('pino-pretty') as typeof pinoPretty;
    const stream = pretty({
      destination: out,
      colorize: (out as { isTTY?: boolean }).isTTY === true,
      sync: true,
      translateTime: 'SYS:HH:MM:ss.l',
    });
    return pino(options, stream);
  }
  return destination ? pino(options, destination as pino.DestinationStream) : pino(options);
}

function isStream(value: unknown): value is NodeJS.WritableStream {
  return typeof (value as { write?: unknown }).write === 'function';
}

type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/**
 * A request's child logger, made only when something is logged at an enabled level. Fastify gives
 * every request a child with its request id; pino builds one by serializing the bindings (through
 * the redaction, because of the wildcard paths). A proxied call at the daemon's default level logs
 * nothing, and paid for all of it. Output is the same: the real child gets the same bindings and options.
 */
export class DeferredChildLogger implements FastifyBaseLogger {
  private made: FastifyBaseLogger | null = null;

  constructor(
    private readonly parent: Logger,
    private readonly bindings: Bindings,
    private readonly options: ChildLoggerOptions,
  ) {}

  get level(): string {
    return this.made?.level ?? this.options.level ?? this.parent.level;
  }

  set level(level: string) {
    this.logger().level = level;
  }

  fatal(...args: unknown[]): void {
    this.write('fatal', args);
  }
  error(...args: unknown[]): void {
    this.write('error', args);
  }
  warn(...args: unknown[]): void {
    this.write('warn', args);
  }
  info(...args: unknown[]): void {
    this.write('info', args);
  }
  debug(...args: unknown[]): void {
    this.write('debug', args);
  }
  trace(...args: unknown[]): void {
    this.write('trace', args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.logger().child(bindings, options);
  }

  /** See `logPlainInfo`: the request's bindings are written as the line's first fields. */
  plainInfo(msg: string, fields: () => Record<string, unknown>): void {
    // A child of its own options (a route's level or serializers) is the child's to write.
    if (this.made !== null || hasAny(this.options)) this.logger().info(fields(), msg);
    else if (this.parent.isLevelEnabled('info')) {
      unredacted(this.parent).info({ ...this.bindings, ...fields() }, msg);
    }
  }

  private write(level: LogLevel, args: unknown[]): void {
    // A level of the route's own (`logLevel`) is the child's to judge: then it is made at once.
    if (this.made === null && this.options.level === undefined && !this.parent.isLevelEnabled(level)) return;
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- needed for the spread call
    (this.logger()[level] as (...a: unknown[]) => void)(...args);
  }

  private logger(): FastifyBaseLogger {
    return (this.made ??= this.parent.child(this.bindings, this.options));
  }
}

function hasAny(options: object): boolean {
  for (const _ in options) return true;
  return false;
}

const unredactedTwins = new WeakMap<Logger, Logger>();

/** `logger` without the redaction pass (a child with no redacted paths), made once. */
function unredacted(logger: Logger): Logger {
  let twin = unredactedTwins.get(logger);
  if (twin === undefined) {
    twin = logger.child({}, { redact: [] });
    unredactedTwins.set(logger, twin);
  }
  return twin;
}

/**
 * An `info` line of a request whose keys are all known and none is a redacted path (the one line
 * per proxied call or request): the redaction pass would change nothing in it, and cost ~20 KB
 * and its share of CPU a line (it parses its paths and clones at every line). Written without it,
 * and without making the request's child logger; `fields` is built only at an enabled level.
 */
export function logPlainInfo(log: FastifyBaseLogger, msg: string, fields: () => Record<string, unknown>): void {
  if (log instanceof DeferredChildLogger) log.plainInfo(msg, fields);
  else log.info(fields(), msg);
}

/** Fastify's `childLoggerFactory`: children made when first used. */
export function deferredChildLogger(
  logger: FastifyBaseLogger,
  bindings: Bindings,
  options: ChildLoggerOptions,
): FastifyBaseLogger {
  return new DeferredChildLogger(logger as Logger, bindings, options);
}
