/**
 * Requests to switch protocols, which Node hands to an `upgrade` listener instead of the routes.
 * The proxy relays one kind, the Responses API's WebSocket (responses-socket.ts); every other
 * upgrade request goes back to the routes as the plain HTTP request it also is, where a proxy
 * route answers it 426 (call-head.ts) and any other route as it answers any request.
 */
import { ServerResponse, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyBaseLogger, FastifyError } from 'fastify';
import type { Queryable } from '../store/db.js';
import { upstreamPath, type ProxyParams, type Target, type TargetRequest } from './call-target.js';
import { checkRunStillRunning } from './call-unmetered.js';
import { providerPath, type ProviderRegistry } from './provider-registry.js';
import { ProxyRefusal, refusalAnswer } from './proxy-refusal.js';
import {
  OpenSockets,
  relayResponsesSocket,
  relaysWebSocket,
  writeHttpAnswer,
  type SocketRelayOptions,
} from './responses-socket.js';

export interface SocketUpgradeDeps extends SocketRelayOptions {
  server: Server;
  registry: ProviderRegistry;
  db: Queryable;
  resolveTarget: (request: TargetRequest) => Promise<Target>;
}

/**
 * A proxy route's parameters and how many segments precede the upstream path (as
 * `segmentsBeforeUpstreamPath` counts them for the routes); null: no proxy route.
 */
function proxyRoute(url: string): { params: Partial<ProxyParams> & { provider: string }; skip: number } | null {
  const path = url.split('?')[0] ?? '';
  let match = /^\/proxy\/runs\/([^/]+)\/([^/]+)\//.exec(path);
  if (match) return { params: { run_id: match[1]!, provider: match[2]! }, skip: 5 };
  match = /^\/proxy\/t\/([^/]+)\/([^/]+)\//.exec(path);
  if (match) return { params: { token: match[1]!, provider: match[2]! }, skip: 5 };
  match = /^\/proxy\/([^/]+)\//.exec(path);
  if (match && match[1] !== 'runs' && match[1] !== 't') return { params: { provider: match[1]! }, skip: 3 };
  return null;
}

/** The `upgrade` listener, and the sockets it opened (closed with the app). */
export function socketUpgrades(deps: SocketUpgradeDeps): {
  onUpgrade: (request: IncomingMessage, socket: Duplex, head: Buffer) => void;
  open: OpenSockets;
} {
  const open = new OpenSockets();

  /** The request as Node would have served it without an `upgrade` listener: a plain one, then closed. */
  function asPlainRequest(request: IncomingMessage, socket: Duplex): void {
    const res = new ServerResponse(request);
    res.shouldKeepAlive = false;
    res.assignSocket(socket as Socket);
    res.once('finish', () => {
      res.detachSocket(socket as Socket);
      socket.end();
    });
    deps.server.emit('request', request, res);
  }

  async function relay(request: IncomingMessage, socket: Duplex, head: Buffer, log: FastifyBaseLogger) {
    const route = proxyRoute(request.url ?? '/')!;
    const provider = deps.registry.get(route.params.provider)!;
    try {
      // Browsers send an Origin with every WebSocket and apply no CORS to it: a page the user
      // visits could otherwise open a socket to a loopback daemon, which guards calls with its
      // own key. Agents and SDKs send none.
      if (request.headers.origin !== undefined)
        throw new ProxyRefusal(403, 'ORIGIN_NOT_ALLOWED', 'The proxy takes no WebSocket from a web page (Origin).');
      const path = providerPath(provider, upstreamPath(request.url ?? '/', route.skip));
      // Authenticated, and the run still RUNNING, before anything connects upstream.
      const target = await deps.resolveTarget({
        params: route.params,
        headers: request.headers,
        socket: { remoteAddress: request.socket.remoteAddress },
      });
      await checkRunStillRunning(deps.db, target);
      relayResponsesSocket(request, socket, head, { provider, path, target }, deps, open);
    } catch (error) {
      const answer = refusalAnswer(error as FastifyError, provider, log);
      writeHttpAnswer(socket, answer.status, Buffer.from(JSON.stringify(answer.body)), 'application/json');
    }
  }

  function onUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const route = proxyRoute(request.url ?? '/');
    const provider = route && deps.registry.get(route.params.provider);
    let relayed: boolean;
    try {
      relayed =
        provider !== undefined &&
        provider !== null &&
        String(request.headers.upgrade).toLowerCase() === 'websocket' &&
        relaysWebSocket(provider, upstreamPath(request.url ?? '/', route!.skip));
    } catch {
      relayed = false; // a bad path: the route refuses it
    }
    if (!relayed) return asPlainRequest(request, socket);
    void relay(request, socket, head, deps.log);
  }

  return { onUpgrade, open };
}
