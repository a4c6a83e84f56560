/**
 * Proxied model calls dispatched before Fastify's router. Each call otherwise passed Fastify's
 * routing, its request and reply objects, its body parser and a dozen hooks that do nothing for
 * it; past them, the handler hijacks the reply anyway. A call taken here runs the same route
 * `onRequest` and handler (proxy-routes.ts) and what the app's hooks do for it (`AppHooks`, wired
 * in api/app.ts to the hooks' own functions), and nothing else.
 *
 * Only a request that the routes would answer the ordinary way is taken: a POST to a proxy route
 * without a percent-escape, for a configured provider's model endpoint, with a declared body
 * within the limit, no Upgrade, Transfer-Encoding or Content-Encoding, from a served host and no
 * other site's page, from an address under its failed-auth limit, while the app is not closing.
 * Every other request goes to Fastify untouched, and so does a call whose head is refused (a bad
 * key, token or run, a full body budget), its body still unread: Fastify answers it as before.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { FastifyBaseLogger, FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { declaredLength } from './body-budget.js';
import { isModelCall } from './call-unmetered.js';
import { segmentsBeforeUpstreamPath, upstreamPath, type ProxyParams } from './call-target.js';
import { providerPath, type ProviderRegistry } from './provider-registry.js';
import type { ProxyRefusal, RefusalAnswer } from './proxy-refusal.js';

/** What of a request the proxy's handler and the app's hooks read: Fastify's request, in part. */
export interface DirectRequest {
  id: string;
  raw: IncomingMessage;
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  socket: IncomingMessage['socket'];
  ip: string;
  params: { run_id?: string; token?: string; provider: string; '*': string };
  log: FastifyBaseLogger;
  body: Buffer | null;
  proxyCall: null;
  principal: null;
}

/** What the app's hooks do for a request, for a call that does not pass them. */
export interface AppHooks {
  /** Whether the `onRequest` hooks would let the request through (Host, Origin, failed-auth limit). */
  admits(raw: IncomingMessage): boolean;
  /** The request's id, as Fastify's `genReqId`. */
  requestId(raw: IncomingMessage): string;
  /** The request's logger, as Fastify's `childLoggerFactory` makes it. */
  requestLog(parent: FastifyBaseLogger, id: string): FastifyBaseLogger;
  /** The `onRequest` hooks' work for a request they let through (its debug line). */
  arrived(request: DirectRequest): void;
  /** The headers an answer the daemon writes itself carries (the `onSend` hook's). */
  ownHeaders(id: string): Record<string, string>;
  /** The `onResponse` hooks: the request's log line, its metrics, the failed-auth accounting. */
  answered(request: DirectRequest, answer: { statusCode: number; elapsedTime: number }, route: string): void;
}

type Listener = (req: IncomingMessage, res: ServerResponse) => void;
type CallRequest = FastifyRequest<{ Params: ProxyParams }>;

export interface DirectCallOptions {
  /** The route whose calls are taken (its pattern names the metrics' series). */
  route: string;
  registry: ProviderRegistry;
  bodyLimitBytes: number;
  hooks: AppHooks;
  /** The routes' logger, the parent of each request's. */
  log: FastifyBaseLogger;
  /** The route's `onRequest` (call-head.ts): resolves the call's provider, path and target. */
  readCallHead(request: CallRequest, reply: FastifyReply, skip: number): Promise<void>;
  /** The route's handler. */
  handle(request: CallRequest, reply: FastifyReply): Promise<void>;
  /** The routes' error handler's answer (its outcome noted for the log line). */
  refused(error: FastifyError | ProxyRefusal, request: DirectRequest): RefusalAnswer;
}

/**
 * A route pattern (`/proxy/t/:token/:provider/*`) as a matcher of the URLs it routes that need no
 * decoding (no percent-escape) and the names of its parameters, in order.
 */
export function routeMatcher(pattern: string): { matcher: RegExp; names: string[] } {
  const names: string[] = [];
  const parts = pattern.split('/').map((part) => {
    if (part === '*') {
      names.push('*');
      return '([^?%#]*)';
    }
    if (part.startsWith(':')) {
      names.push(part.slice(1));
      return '([^/?%#]+)';
    }
    return part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  });
  return { matcher: new RegExp(`^${parts.join('/')}(\\?[^%#]*)?$`), names };
}

/** The calls into a named run that skip Fastify: `take` for `dispatchBeforeFastify`; `close` when the app closes. */
export function directCalls(options: DirectCallOptions) {
  const { registry, bodyLimitBytes, hooks } = options;
  const skip = segmentsBeforeUpstreamPath(options.route);
  const { matcher, names } = routeMatcher(options.route);
  let closing = false;

  const take = (req: IncomingMessage, res: ServerResponse, toFastify: () => void): boolean => {
    try {
      return takeCall(req, res, toFastify);
    } catch {
      return false; // anything unexpected in the head: Fastify reads it
    }
  };

  const takeCall = (req: IncomingMessage, res: ServerResponse, toFastify: () => void): boolean => {
    if (req.method !== 'POST' || closing) return false;
    const match = matcher.exec(req.url ?? '');
    if (!match) return false;
    const params: Record<string, string> = {};
    for (let i = 0; i < names.length; i++) params[names[i]!] = match[i + 1]!;
    const { headers } = req;
    if (headers.upgrade !== undefined || headers['transfer-encoding'] !== undefined) return false;
    if (headers['content-encoding'] !== undefined) return false;
    const declared = declaredLength(req);
    if (declared === null || declared === 0 || declared > bodyLimitBytes) return false;
    const provider = registry.get(params.provider!);
    if (!provider) return false;
    let path: string;
    try {
      path = providerPath(provider, upstreamPath(req.url!, skip));
    } catch {
      return false; // a dot segment: the route refuses it
    }
    if (!isModelCall(provider, 'POST', path) || !hooks.admits(req)) return false;
    runCall(options, skip, req, res, params as DirectRequest['params'], declared, toFastify).catch((error: unknown) => {
      options.log.error({ err: error }, 'a proxied call failed outside its handler');
      res.destroy();
    });
    return true;
  };

  return {
    take,
    close() {
      closing = true;
    },
  };
}

/**
 * Puts `take` in front of Fastify's request listener (the server's first): a request it does not
 * take goes to Fastify at once; one it took may still be given to Fastify later (`toFastify`), its
 * body unread. The server's other request listeners stay as they were, in their order.
 */
export function dispatchBeforeFastify(
  server: Server,
  take: (req: IncomingMessage, res: ServerResponse, toFastify: () => void) => boolean,
): void {
  const routing = server.listeners('request')[0] as Listener | undefined;
  if (!routing) return;
  server.removeListener('request', routing);
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    if (!take(req, res, () => routing(req, res))) routing(req, res);
  });
}

/**
 * A request's body of `length` declared bytes, whole; rejects when the client leaves first.
 * `on`, not `once`: each event comes once to a request, and `once` wraps every listener.
 */
export function readBody(req: IncomingMessage, length: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let received = 0;
    req.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      received += chunk.length;
    });
    req.on('end', () => {
      if (received !== length) reject(new Error('The body did not match its Content-Length.'));
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received));
    });
    req.on('close', () => {
      if (!req.complete) reject(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
    });
    req.on('error', reject);
  });
}

/** One call taken: its head read as the route reads it, its body, the handler, the hooks' work. */
async function runCall(
  options: DirectCallOptions,
  skip: number,
  req: IncomingMessage,
  res: ServerResponse,
  params: DirectRequest['params'],
  length: number,
  toFastify: () => void,
): Promise<void> {
  const { route, hooks, log } = options;
  const startedAt = performance.now();
  const id = hooks.requestId(req);
  const request: DirectRequest = {
    id,
    raw: req,
    method: 'POST',
    url: req.url!,
    headers: req.headers,
    socket: req.socket,
    ip: req.socket.remoteAddress ?? '',
    params,
    log: hooks.requestLog(log, id),
    body: null,
    proxyCall: null,
    principal: null,
  };
  const asFastify = request as unknown as CallRequest;
  const reply = { raw: res, hijack() {} } as unknown as FastifyReply;
  try {
    await options.readCallHead(asFastify, reply, skip);
  } catch {
    // Refused from its head: Fastify answers it, hooks and all, its body still unread.
    toFastify();
    return;
  }
  hooks.arrived(request);
  // Fastify's `onResponse` hooks run when the answer is flushed, or fails.
  const answered = () => {
    res.off('finish', answered);
    res.off('error', answered);
    try {
      hooks.answered(request, { statusCode: res.statusCode, elapsedTime: performance.now() - startedAt }, route);
    } catch (error) {
      request.log.error({ err: error }, 'a request hook failed'); // as Fastify logs an onResponse hook's error
    }
  };
  res.on('finish', answered);
  res.on('error', answered);
  try {
    request.body = await readBody(req, length);
  } catch (error) {
    // As Fastify's body reader tags it (a 4xx: the client left), and answers it, if it still can.
    const failure = error as FastifyError;
    if (!(typeof failure.statusCode === 'number' && failure.statusCode >= 400)) failure.statusCode = 400;
    answerRefusal(options, request, res, failure);
    return;
  }
  try {
    await options.handle(asFastify, reply);
  } catch (error) {
    answerRefusal(options, request, res, error as FastifyError);
  }
}

/** A call refused past its head, answered as the routes' error handler and Fastify's `send` answer it. */
function answerRefusal(options: DirectCallOptions, request: DirectRequest, res: ServerResponse, error: FastifyError) {
  try {
    const answer = options.refused(error, request);
    if (res.headersSent || res.destroyed) return;
    const json = typeof answer.body !== 'string';
    const payload = json ? JSON.stringify(answer.body) : (answer.body as string);
    res.writeHead(answer.status, {
      'content-type': json ? 'application/json; charset=utf-8' : 'text/plain; charset=utf-8',
      ...answer.headers,
      ...options.hooks.ownHeaders(request.id),
      'content-length': Buffer.byteLength(payload),
    });
    res.end(payload);
  } catch (failure) {
    request.log.error({ err: failure }, 'a proxied call could not be answered');
    res.destroy();
  }
}
