/**
 * Who may address the daemon from a browser. A daemon on loopback trusts its callers (its own key
 * stands in for a missing one, registration is open), so a web page must not become a caller:
 *
 * - **Host.** A page of `evil.example` whose name is made to resolve to 127.0.0.1 (DNS rebinding)
 *   is, to the browser, the same origin as its own site: it may read every answer. Its requests
 *   carry `Host: evil.example`. Only the names the daemon serves are answered (loopback names and
 *   addresses, the address the connection reached, the public URL's host, `allowedHosts`); any
 *   other gets 421. An address in `Host` cannot be rebound: only a name can.
 * - **Origin.** A form on any site can POST `text/plain` to the daemon without a preflight. A
 *   request to the API or the proxy that a browser marks as coming from another site (an `Origin`
 *   other than the daemon's own, or `Sec-Fetch-Site: cross-site`/`same-site` without one) gets 403,
 *   unless its origin is in `allowedOrigins`. Clients that are not browsers send neither header
 *   and are not affected; the daemon's own dashboard is its own origin.
 */
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { BlockList, isIP } from 'node:net';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';

export interface OriginSettings {
  /** The daemon's address as clients reach it: its host is served, its origin is the daemon's own. */
  publicUrl?: string | null;
  /** Host names served besides the loopback ones and the public URL's. */
  allowedHosts?: readonly string[];
  /** Web origins besides the daemon's own whose pages may call the API and the proxy. */
  allowedOrigins?: readonly string[];
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
LOOPBACK.addSubnet('::ffff:127.0.0.0', 104, 'ipv6');

/** A host name as compared: lower case, without brackets or a trailing dot. */
function bareName(hostname: string): string {
  return hostname
    .toLowerCase()
    .replace(/^\[(.*)\]$/, '$1')
    .replace(/\.$/, '');
}

/** The name a `Host` header names (its port dropped, as a URL parses it); null when it names none. */
export function hostNameOf(host: string): string | null {
  if (/[@/\\?#\s]/.test(host)) return null;
  try {
    return bareName(new URL(`http://${host}`).hostname);
  } catch {
    return null;
  }
}

/** An IPv4-mapped IPv6 address (`::ffff:10.0.0.5`) as its IPv4 one. */
const unmapped = (address: string) => address.replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/i, '$1');

function isLoopbackName(name: string): boolean {
  // `*.localhost` always resolves to loopback (RFC 6761): no DNS answer can rebind it.
  if (name === 'localhost' || name.endsWith('.localhost')) return true;
  const family = isIP(name);
  return family !== 0 && LOOPBACK.check(name, family === 4 ? 'ipv4' : 'ipv6');
}

/** The request path's routes the origin check guards: the API and the proxy (not the dashboard's pages). */
const guardedRoute = (request: FastifyRequest) => {
  const route = request.routeOptions.url ?? '';
  return route.startsWith('/v1/') || route.startsWith('/proxy/');
};

/**
 * The checks' refusal of a request (null: none), `guarded` when its route is the API's or the
 * proxy's. Made once per app from its settings.
 */
function originRefusals(settings: OriginSettings): (raw: IncomingMessage, guarded: boolean) => ApiError | null {
  const publicUrl = settings.publicUrl ? new URL(settings.publicUrl) : null;
  const servedNames = new Set((settings.allowedHosts ?? []).map(bareName));
  if (publicUrl) servedNames.add(bareName(publicUrl.hostname));
  const allowedOrigins = new Set((settings.allowedOrigins ?? []).map((origin) => new URL(origin).origin));

  // What a `Host` header names, and whether that name is served: the same header comes on nearly
  // every request, so its reading is kept (a few: made-up headers only clear the map).
  const hostReadings = new Map<string, { name: string | null; served: boolean }>();
  const readHost = (host: string) => {
    let reading = hostReadings.get(host);
    if (reading === undefined) {
      const name = hostNameOf(host);
      reading = { name, served: name !== null && (isLoopbackName(name) || servedNames.has(name)) };
      if (hostReadings.size >= 64) hostReadings.clear();
      hostReadings.set(host, reading);
    }
    return reading;
  };

  const servesHost = (raw: IncomingMessage, host: string): boolean => {
    const { name, served } = readHost(host);
    if (name === null) return false;
    if (served) return true;
    // An address (never a name) the client connected to: a daemon bound to 0.0.0.0, reached by IP.
    const local = raw.socket.localAddress;
    return isIP(name) !== 0 && local !== undefined && unmapped(name) === unmapped(bareName(local));
  };

  /** The daemon's own origin: the page it served (same host), or its public URL. */
  const isOwnOrigin = (origin: URL, host: string | undefined): boolean => {
    if (publicUrl && origin.origin === publicUrl.origin) return true;
    if (host === undefined) return false;
    try {
      return new URL(`${origin.protocol}//${host}`).host === origin.host;
    } catch {
      return false;
    }
  };

  const fromAnotherSite = (headers: IncomingHttpHeaders): boolean => {
    const origin = headers.origin;
    if (origin === undefined) {
      const site = headers['sec-fetch-site'];
      return (site === 'cross-site' || site === 'same-site') && allowedOrigins.size === 0;
    }
    let parsed: URL;
    try {
      parsed = new URL(origin);
    } catch {
      return true; // `null` (a sandboxed page, a file) or garbage: no origin we could trust
    }
    return !allowedOrigins.has(parsed.origin) && !isOwnOrigin(parsed, headers.host);
  };

  return (raw, guarded) => {
    const host = raw.headers.host;
    // No Host at all (HTTP/1.0): not a browser, which always sends one.
    if (host !== undefined && !servesHost(raw, host)) {
      return new ApiError(
        'MISDIRECTED_REQUEST',
        'This daemon does not serve that host name: use its address, or add the name to allowedHosts (RUNGUARD_ALLOWED_HOSTS).',
      );
    }
    if (guarded && fromAnotherSite(raw.headers)) {
      return new ApiError(
        'CROSS_SITE_REFUSED',
        'A page of another site may not call runguard from a browser: add its origin to allowedOrigins (RUNGUARD_ALLOWED_ORIGINS) if it should.',
      );
    }
    return null;
  };
}

/**
 * Registers the checks on every route of `app`. Answers whether a request to a guarded route (the
 * API, the proxy) passes them, for a call that does not pass the hook (proxy/direct-calls.ts).
 */
export function registerOriginChecks(
  app: FastifyInstance,
  settings: OriginSettings,
): (raw: IncomingMessage) => boolean {
  const refusal = originRefusals(settings);
  // A callback hook, not an async one: every request passes here, and a promise each is waste.
  app.addHook('onRequest', (request, _reply, done) => {
    const refused = refusal(request.raw, guardedRoute(request));
    if (refused) done(refused);
    else done();
  });
  return (raw) => refusal(raw, true) === null;
}
