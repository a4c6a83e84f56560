/**
 * The Fastify server itself: its timeouts and limits, request ids, one log line per request, and
 * the headers every answer the daemon writes carries. Routes are registered by the app factory.
 */
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { IncomingMessage } from 'node:http';
import type { Logger } from 'pino';
import type { Principal } from '../admin/principal.js';
import { randomUuid } from '../uuid-text.js';
import { deferredChildLogger, loggedAsCall, loggedUrl, logPlainInfo, requestOutcomes } from '../logger.js';

/** What one client may hold of the HTTP server. */
export interface HttpLimits {
  /** Time to receive a whole request; a stalled upload is cut (408) at it. @default 120_000 */
  requestTimeoutMs?: number;
  /** Time to receive a request's headers. @default 30_000 */
  headersTimeoutMs?: number;
  /** Open client connections at most (see connection-guard.ts); absent or null: no cap. */
  maxConnections?: number | null;
}

/**
 * A request's one `info` line at its answer; a proxied call's is written when its step is
 * recorded (call-result.ts), so its answer is logged at `debug` only.
 */
export function logAnswered(request: FastifyRequest, reply: Pick<FastifyReply, 'statusCode' | 'elapsedTime'>): void {
  const ms = Math.round(reply.elapsedTime);
  if (loggedAsCall.has(request)) {
    request.log.debug({ status: reply.statusCode, ms }, 'request completed');
    return;
  }
  const principal = request.principal as Principal | null;
  const target = request.proxyCall?.target;
  const refusal = requestOutcomes.get(request);
  logPlainInfo(request.log, 'request', () => ({
    method: request.method,
    url: loggedUrl(request),
    user: principal?.subjectId ?? target?.userId ?? null,
    run: target?.runId ?? null,
    ...(refusal ? { decision: refusal.decision, reason: refusal.reason } : {}),
    status: reply.statusCode,
    ms,
  }));
}

/** A request's id: the client's `x-request-id` when it is a plain token, else a new one. */
export function requestIdOf(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && /^[\w.-]{1,128}$/.test(given) ? given : randomUuid();
}

/**
 * The headers of an answer the daemon writes itself. What @fastify/helmet would set for a JSON
 * API, without the dependency; a proxied answer carries the provider's headers instead. No HSTS:
 * the daemon speaks plain HTTP (TLS, where used, ends in front of it).
 */
export function ownAnswerHeaders(requestId: string): Record<string, string> {
  return {
    'x-request-id': requestId,
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
  };
}

/** A Fastify instance with the daemon's server settings and request hooks, no routes yet. */
export function createFastify(logger: Logger, bodyLimitBytes: number, http?: HttpLimits): FastifyInstance {
  const requestTimeout = http?.requestTimeoutMs ?? 120_000;
  const headersTimeout = Math.min(http?.headersTimeoutMs ?? 30_000, requestTimeout);
  const app = Fastify({
    // Node checks these timeouts every connectionsCheckingInterval (30 s by default): often enough
    // that a stalled client is cut near its timeout, not up to 30 s after it.
    requestTimeout,
    http: {
      headersTimeout,
      requestTimeout,
      connectionsCheckingInterval: Math.min(30_000, Math.max(250, Math.floor(headersTimeout / 4))),
    },
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- fixes the instance's logger type for the routes
    loggerInstance: logger as FastifyBaseLogger,
    childLoggerFactory: deferredChildLogger,
    // Replaced by one line per request (the hooks below), and per proxied call (its step's record).
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: bodyLimitBytes,
    // On close: stop accepting, drop idle keep-alive sockets, answer 503 to requests arriving on
    // busy ones, and let in-flight requests finish (the daemon bounds that with its grace period).
    forceCloseConnections: 'idle',
    return503OnClosing: true,
    routerOptions: { ignoreTrailingSlash: true },
    // The router's own refusals (a path with a malformed percent-escape) come before any handler:
    // answered in the contract's format too.
    frameworkErrors: (error, request, reply) => {
      request.log.info({ code: error.code }, 'request refused by the router');
      void (reply as FastifyReply)
        .status(400)
        .send({ detail: 'The request path is not a valid URL (a malformed percent-escape).', code: 'BAD_REQUEST' });
    },
    genReqId: requestIdOf,
  });
  // Callback hooks, not async ones: every request passes here, and a promise each is waste.
  app.addHook('onRequest', (request, _reply, done) => {
    request.log.debug({ req: request }, 'incoming request');
    done();
  });
  app.addHook('onResponse', (request, reply, done) => {
    logAnswered(request, reply);
    done();
  });
  app.addHook('onSend', async (request, reply) => {
    // Only answers the daemon writes itself: a proxied answer is hijacked past this hook.
    reply.headers(ownAnswerHeaders(request.id));
    // API answers hold workspace data and credentials (a new key, a token): never in a cache.
    if ((request.routeOptions.url ?? request.url).startsWith('/v1/')) reply.header('cache-control', 'no-store');
  });
  return app;
}
