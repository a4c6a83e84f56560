/**
 * Forwarding one HTTP exchange to an upstream through its undici pool: header hygiene on the way
 * out and on the way back, and a streamed relay of the answer that lets a side reader see every
 * chunk without holding the stream up. Knows nothing of runs, steps or Fastify.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import type { Provider } from './provider-registry.js';

/** Where an exchange goes: an origin and base path, and the dispatcher that connects there (a provider's pool). */
export interface Upstream {
  readonly origin: string;
  readonly basePath: string;
  readonly pool: Pick<Dispatcher, 'dispatch'>;
}

/** RFC 9110 7.6.1 connection-specific headers, plus the de-facto `proxy-connection` and `keep-alive`. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'proxy-authorization',
  'proxy-authenticate',
  'proxy-connection',
]);

/** Recomputed or owned by the hop we make: the pool sets them from its origin and the body. */
const NOT_FORWARDED_UPSTREAM = new Set(['host', 'content-length', 'expect', 'accept-encoding']);

/** A guardrail API key (`lg_<prefix>_...`) is never sent to a provider, whatever header it is in. */
const GUARDRAIL_KEY = /\blg_[a-z0-9]{12}_/;

/** Header names listed in `Connection`, which are hop-by-hop for this connection only. */
const NONE_LISTED: ReadonlySet<string> = new Set();

function connectionListed(value: string | string[] | undefined): ReadonlySet<string> {
  // Most calls name none, or only `keep-alive` (SDKs and providers send it), hop-by-hop already:
  // no Set made for them.
  if (value === undefined || value === '' || value === 'keep-alive') return NONE_LISTED;
  const text = Array.isArray(value) ? value.join(',') : (value ?? '');
  return new Set(
    text
      .split(',')
      .map((name) => name.trim().toLowerCase())
      .filter(Boolean),
  );
}

/**
 * The headers to send upstream: the client's, minus hop-by-hop ones, every `x-runguard-*`, and any
 * header carrying a guardrail key. Provider credentials (`authorization`, `x-api-key`, `api-key`)
 * pass untouched. `accept-encoding: identity`, so the usage reader sees plain bytes: SDKs ask for
 * gzip and undici does not decompress.
 */
export function upstreamHeaders(incoming: IncomingHttpHeaders): Record<string, string | string[]> {
  const listed = connectionListed(incoming.connection);
  const out: Record<string, string | string[]> = {};
  // `for...in`, not `Object.entries`: every call's headers pass here, an array a header was waste.
  for (const name in incoming) {
    const value = incoming[name];
    if (value === undefined || !Object.hasOwn(incoming, name)) continue;
    if (HOP_BY_HOP.has(name) || NOT_FORWARDED_UPSTREAM.has(name) || listed.has(name)) continue;
    if (name.startsWith('x-runguard-')) continue;
    if (GUARDRAIL_KEY.test(Array.isArray(value) ? value.join(',') : value)) continue;
    out[name] = value;
  }
  out['accept-encoding'] = 'identity';
  return out;
}

/**
 * Provider headers that must not become the daemon's: a cookie the provider sets is scoped to the
 * provider's site, and relayed it would land on the daemon's origin (where a browser would keep it
 * and send it to every route of ours). SDKs keep no cookies, so nothing needs it.
 */
const NOT_RELAYED_TO_CLIENT = new Set(['set-cookie']);

/** The upstream's response headers for the client, minus hop-by-hop ones and cookies. */
export function clientHeaders(upstream: Dispatcher.ResponseData['headers']): Record<string, string | string[]> {
  const listed = connectionListed(upstream.connection);
  const out: Record<string, string | string[]> = {};
  for (const name in upstream) {
    const value = upstream[name];
    if (
      value === undefined ||
      !Object.hasOwn(upstream, name) ||
      HOP_BY_HOP.has(name) ||
      NOT_RELAYED_TO_CLIENT.has(name) ||
      listed.has(name)
    )
      continue;
    out[name] = value;
  }
  return out;
}

export interface ForwardRequest {
  method: string;
  /** Path below the provider's base, starting with `/`, query string included. */
  path: string;
  headers: Record<string, string | string[]>;
  body: Buffer | null;
}

/** How a relayed exchange ended; told once. */
export type RelayEnd =
  /** The upstream's answer reached the client whole (flushed). */
  | { kind: 'complete' }
  /** The client went away, before or during the answer. */
  | { kind: 'client-left' }
  /** The upstream failed before answering: nothing has been sent to the client. */
  | { kind: 'upstream-failed'; error: Error }
  /** The upstream failed mid-answer: the client's response was cut too. */
  | { kind: 'upstream-broken'; error: Error };

export interface RelayHooks {
  /** The upstream's final status and headers; answers the headers to send the client. */
  answered(statusCode: number, headers: IncomingHttpHeaders): Record<string, string | string[]>;
  /** Each body chunk, as it is written to the client. */
  chunk(chunk: Buffer): void;
  ended(end: RelayEnd): void;
}

/** A relay whose answer is held back (`forward` with `held`): nothing reaches the client before `release`. */
export interface HeldAnswer {
  /** Sends the client what the upstream answered so far, and the rest as it comes. */
  release(): void;
  /**
   * Aborts the upstream request (or keeps it from being sent) and drops its answer. The client's
   * response is left untouched, for the caller to answer; `ended` is not told.
   */
  cancel(reason: Error): void;
}

/**
 * Sends the request upstream through the provider's pool and relays the answer into `res` as it
 * arrives. The pool's dispatch handler is the whole relay: no body stream, no pipe, no
 * AbortController per call (~9 KiB less garbage per proxied call, of ~66).
 * Redirects are the client's to follow, never the proxy's: the pool has no redirect interceptor.
 * With `held`, the answer waits (its status, headers and first bytes kept; past 64 KiB, the
 * upstream paused) until `release`, or is dropped by `cancel`: the request goes upstream while
 * the caller finishes something the answer must not overtake.
 */
export function forward(
  provider: Upstream,
  request: ForwardRequest,
  res: ServerResponse,
  hooks: RelayHooks,
  options: { held?: boolean } = {},
): HeldAnswer {
  const relay = new ResponseRelay(res, hooks, options.held === true);
  try {
    provider.pool.dispatch(
      {
        origin: provider.origin,
        path: provider.basePath + request.path,
        method: request.method,
        headers: request.headers,
        body: request.body,
      },
      relay,
    );
  } catch (error) {
    relay.onResponseError(null, error instanceof Error ? error : new Error(String(error)));
  }
  return relay;
}

class ClientLeft extends Error {
  constructor() {
    super('The client closed the connection.');
  }
}

/**
 * Bytes of a held answer kept before the upstream is paused. A record commits in milliseconds: a
 * stream's first events wait in memory rather than pausing and resuming the upstream (which cost
 * streams at 64 connections), while an answer that outgrows this waits in the upstream's socket.
 */
const HELD_BYTES_BEFORE_PAUSE = 64 * 1024;

/** What a held relay keeps until it is released. */
interface HeldState {
  head: { statusCode: number; headers: Record<string, string | string[]>; stream: boolean } | null;
  chunks: Buffer[];
  bytes: number;
  /** The upstream was paused for holding too much. */
  paused: boolean;
  /** The upstream's answer ended (`true`) or failed (the error) while held. */
  end: true | Error | null;
}

/**
 * Undici's handler for one exchange. Chunks are written to the client as undici hands them over;
 * a full client socket pauses the upstream's until it drains. The client leaving aborts the
 * upstream request (or, if it still waits for a connection, keeps it from being sent); the
 * upstream failing mid-answer cuts the client's response. While held, the answer is kept instead
 * of written, the upstream paused once it holds more than HELD_BYTES_BEFORE_PAUSE.
 */
class ResponseRelay implements Dispatcher.DispatchHandler, HeldAnswer {
  private controller: Dispatcher.DispatchController | null = null;
  private answered = false;
  private clientLeft = false;
  private done = false;
  /** Why the exchange was called off before it was released (`cancel`). */
  private cancelled: Error | null = null;
  private held: HeldState | null;
  private drainWatched = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly hooks: RelayHooks,
    held: boolean,
  ) {
    this.held = held ? { head: null, chunks: [], bytes: 0, paused: false, end: null } : null;
    res.on('close', () => this.clientClosed());
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.cancelled) controller.abort(this.cancelled);
    else if (this.clientLeft) controller.abort(new ClientLeft());
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    // 1xx answers are informational: the final one follows.
    if (statusCode < 200 || this.done) return;
    // Answered once the headers are taken: if either step throws, undici reports it as a
    // failure before the answer, and the client gets the proxy's error instead.
    const clientHeaders = this.hooks.answered(statusCode, headers);
    // A stream's client gets the headers when the upstream sends them, not with the first event;
    // any other answer's headers go out with its first bytes, one write fewer.
    const stream = /^text\/event-stream/i.test(String(headers['content-type'] ?? ''));
    this.answered = true;
    if (this.held) {
      this.held.head = { statusCode, headers: clientHeaders, stream };
      return;
    }
    this.res.writeHead(statusCode, clientHeaders);
    if (stream) this.res.flushHeaders();
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.done) return;
    this.hooks.chunk(chunk);
    if (this.held) {
      this.held.chunks.push(chunk);
      this.held.bytes += chunk.length;
      if (this.held.bytes > HELD_BYTES_BEFORE_PAUSE && !this.held.paused) {
        this.held.paused = true;
        controller.pause();
      }
      return;
    }
    if (!this.res.write(chunk)) this.pauseUntilDrained();
  }

  onResponseEnd(): void {
    if (this.done) return;
    if (this.held) return void (this.held.end = true);
    this.res.end(() => this.finish({ kind: 'complete' }));
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, error: Error): void {
    if (this.done) return; // the client left first, or the exchange was cancelled: this is its abort
    if (this.held) return void (this.held.end = error);
    if (!this.answered) return this.finish({ kind: 'upstream-failed', error });
    this.finish({ kind: 'upstream-broken', error });
    this.res.destroy(error);
  }

  release(): void {
    const held = this.held;
    if (!held) return;
    this.held = null;
    if (this.done) return;
    const { head, chunks, end, paused } = held;
    let flowing = true;
    if (head) {
      this.res.writeHead(head.statusCode, head.headers);
      if (head.stream && chunks.length === 0) this.res.flushHeaders();
      for (const chunk of chunks) flowing = this.res.write(chunk);
    }
    if (end === true) this.res.end(() => this.finish({ kind: 'complete' }));
    else if (end) this.onResponseError(this.controller, end);
    // Paused for holding too much: it goes on now, or once the client has drained what was kept.
    else if (paused && flowing) this.controller?.resume();
    else if (!flowing) this.pauseUntilDrained();
  }

  cancel(reason: Error): void {
    if (this.done) return;
    this.done = true;
    this.held = null;
    this.cancelled = reason;
    this.controller?.abort(reason);
  }

  /** Pauses the upstream until the client's socket drains; most answers never fill it, and need no listener. */
  private pauseUntilDrained(): void {
    this.controller?.pause();
    if (this.drainWatched) return;
    this.drainWatched = true;
    this.res.on('drain', () => this.controller?.resume());
  }

  private clientClosed(): void {
    if (this.done || this.res.writableFinished) return;
    this.clientLeft = true;
    this.finish({ kind: 'client-left' });
    this.controller?.abort(new ClientLeft());
  }

  private finish(end: RelayEnd): void {
    if (this.done) return;
    this.done = true;
    this.hooks.ended(end);
  }
}

/**
 * Why an upstream exchange failed, as the proxy answers it: a status, a stable code, and a message
 * that names the upstream (its host, and what sets it) and the cause, so that the agent, the step
 * and `runs show` say which one, not only the daemon's log.
 */
export function upstreamFailure(
  error: unknown,
  provider?: Pick<Provider, 'name' | 'origin' | 'setBy'>,
): { status: number; code: string; message: string } {
  const code = (error as { code?: string })?.code ?? '';
  const cause = (error as { cause?: { code?: string } })?.cause?.code ?? code;
  const which = provider
    ? ` (${provider.name} at ${new URL(provider.origin).host}${provider.setBy ? `, set by ${provider.setBy}` : ''}${cause ? `: ${cause}` : ''})`
    : '';
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT') {
    return { status: 504, code: 'UPSTREAM_TIMEOUT', message: `The provider did not answer in time${which}.` };
  }
  return { status: 502, code: 'UPSTREAM_UNAVAILABLE', message: `The provider could not be reached${which}.` };
}
