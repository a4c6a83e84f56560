/**
 * Forwarding one HTTP exchange to an upstream through its undici pool: header hygiene on the way
 * out and on the way back, and a streamed relay of the answer that lets a side reader see every
 * chunk without holding the stream up. Knows nothing of runs, steps or Fastify.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { finished, type Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Provider } from './provider-registry.js';

/** RFC 9110 7.6.1 connection-specific headers, plus the de-facto `proxy-connection` and `keep-alive`. */
const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade',
  'proxy-authorization', 'proxy-authenticate', 'proxy-connection',
]);

/** Recomputed or owned by the hop we make: the pool sets them from its origin and the body. */
const NOT_FORWARDED_UPSTREAM = new Set(['host', 'content-length', 'expect', 'accept-encoding']);

/** A guardrail API key (`lg_<prefix>_...`) is never sent to a provider, whatever header it is in. */
const GUARDRAIL_KEY = /\blg_[a-z0-9]{12}_/;

/** Header names listed in `Connection`, which are hop-by-hop for this connection only. */
function connectionListed(value: string | string[] | undefined): Set<string> {
  const text = Array.isArray(value) ? value.join(',') : (value ?? '');
  return new Set(text.split(',').map((t) => t.trim().toLowerCase()).filter(Boolean));
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
  for (const [name, value] of Object.entries(incoming)) {
    if (value === undefined) continue;
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
  for (const [name, value] of Object.entries(upstream)) {
    if (value === undefined || HOP_BY_HOP.has(name) || NOT_RELAYED_TO_CLIENT.has(name) || listed.has(name)) continue;
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
  signal: AbortSignal;
}

/** Sends the request; resolves at the upstream's response headers, whatever their status. */
export function forward(provider: Provider, request: ForwardRequest): Promise<Dispatcher.ResponseData> {
  return provider.pool.request({
    origin: provider.origin,
    path: provider.basePath + request.path,
    method: request.method as Dispatcher.HttpMethod,
    headers: request.headers,
    body: request.body,
    signal: request.signal,
    // No redirect interceptor on the pool: a redirect is the client's to follow, never the proxy's.
  });
}

/** Why an upstream exchange failed, as the proxy answers it: a status and a stable code. */
export function upstreamFailure(error: unknown): { status: number; code: string; message: string } {
  const code = (error as { code?: string })?.code ?? '';
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT') {
    return { status: 504, code: 'UPSTREAM_TIMEOUT', message: 'The provider did not answer in time.' };
  }
  return { status: 502, code: 'UPSTREAM_UNAVAILABLE', message: 'The provider could not be reached.' };
}

/**
 * Streams `body` to `res` with back-pressure; `onChunk` sees a reference to every chunk as it is
 * written. `onDone` runs once: `null` when the body ended and was flushed to the client, else the
 * error (upstream broke, client went away). Either side failing destroys the other.
 */
export function relay(
  body: Readable,
  res: ServerResponse,
  onChunk: (chunk: Buffer) => void,
  onDone: (error: Error | null) => void,
): void {
  // Not stream.pipeline: on every completion it aborts an AbortController of its own, and the
  // DOMException that makes, with its stack, was a few percent of the daemon's time under load.
  let done = false;
  const settle = (error: Error | null) => {
    if (done) return;
    done = true;
    onDone(error);
  };
  body.on('data', onChunk);
  body.pipe(res);
  finished(body, (error) => {
    if (!error) return; // ended: `pipe` ends `res`, whose finish settles
    res.destroy(error);
    settle(error);
  });
  finished(res, (error) => {
    if (error) body.destroy(error);
    settle(error ?? null);
  });
}
