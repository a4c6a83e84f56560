/**
 * pino, with every credential-bearing field redacted wherever it turns up in a log line, and
 * request URLs stripped of the run-scoped proxy tokens they may carry.
 */
import { createRequire } from 'node:module';
import { pino, type Logger, type LoggerOptions } from 'pino';
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
    const stream = pretty({ destination: out, colorize: (out as { isTTY?: boolean }).isTTY === true, sync: true, translateTime: 'SYS:HH:MM:ss.l' });
    return pino(options, stream);
  }
  return destination ? pino(options, destination as pino.DestinationStream) : pino(options);
}

function isStream(value: unknown): value is NodeJS.WritableStream {
  return typeof (value as { write?: unknown }).write === 'function';
}
