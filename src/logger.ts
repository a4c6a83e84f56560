/**
 * pino, with every credential-bearing field redacted wherever it turns up in a log line, and
 * request URLs stripped of the run-scoped proxy tokens they may carry.
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

/**
 * A proxy URL `/proxy/t/<token>/...` is a bearer credential by itself (it authorizes proxying
 * into a run), so the token never reaches a log line. Query parameters that commonly carry
 * credentials are hidden too.
 */
export function redactUrl(url: string): string {
  return url
    .replace(/(\/proxy\/t\/)[^/?#]+/g, `$1${CENSOR}`)
    .replace(/([?&](?:api[_-]?key|key|token|access_token)=)[^&#]*/gi, `$1${CENSOR}`);
}

interface RequestLike {
  method?: string;
  url?: string;
  host?: string;
  hostname?: string;
  ip?: string;
  headers?: Record<string, unknown>;
  socket?: { remotePort?: number; remoteAddress?: string };
}

/** Fastify's request serializer, with the URL redacted. */
function serializeRequest(req: RequestLike) {
  return {
    method: req.method,
    url: typeof req.url === 'string' ? redactUrl(req.url) : req.url,
    host: req.host ?? req.hostname,
    remoteAddress: req.ip ?? req.socket?.remoteAddress,
    remotePort: req.socket?.remotePort,
  };
}

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
 * the redaction, because of the wildcard paths) and, for routes with serializers of their own (the
 * proxy's), by copying the serializers. A proxied call at the daemon's default level logs nothing,
 * and paid for all of it. Output is the same: the real child gets the same bindings and options.
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

/** Fastify's `childLoggerFactory`: children made when first used. */
export function deferredChildLogger(
  logger: FastifyBaseLogger,
  bindings: Bindings,
  options: ChildLoggerOptions,
): FastifyBaseLogger {
  return new DeferredChildLogger(logger as Logger, bindings, options);
}
