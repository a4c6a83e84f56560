/**
 * Keeps the daemon reachable when clients open more connections than it has file descriptors.
 * Past the limit, Node's accept fails with EMFILE and new connections are dropped, /health's
 * included, and the database pool cannot open a connection either. So open client connections are
 * held under a cap below the descriptor limit, and a connection over the cap makes room by closing
 * the oldest connection that has no request in progress (an idle keep-alive, or one that never
 * sent a request); only when every connection is busy is the newcomer closed instead. A busy one
 * is bounded by the request timeout, and only an authenticated request stays busy for long.
 */
import { readFileSync } from 'node:fs';
import type { Server, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** Descriptors kept for everything but client connections: the database pool, Redis, files, the runtime. */
const RESERVED_DESCRIPTORS = 64;

/** The soft open-file limit of this process (Linux); null where it cannot be read. */
export function openFileLimit(limitsFile = '/proc/self/limits'): number | null {
  try {
    const line = readFileSync(limitsFile, 'utf8')
      .split('\n')
      .find((limitsLine) => limitsLine.startsWith('Max open files'));
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
    const limit = Number(soft);
    return soft && Number.isSafeInteger(limit) ? limit : null;
  } catch {
    return null;
  }
}

/**
 * The cap for a descriptor limit: each proxied call may also hold an upstream connection, so half
 * of what is left after the reserve. Null (no cap) when the limit is unknown or unlimited.
 */
export function connectionCapFor(descriptorLimit: number | null): number | null {
  if (descriptorLimit === null) return null;
  return Math.max(16, Math.floor((descriptorLimit - RESERVED_DESCRIPTORS) / 2));
}

export interface ConnectionGuard {
  readonly open: number;
  /** Connections closed to make room, or refused. */
  readonly shed: number;
}

export function guardConnections(server: Server, maxConnections: number): ConnectionGuard {
  /** Open client sockets, oldest first, with their count of requests in progress. */
  const sockets = new Map<Socket, { busy: number }>();
  let shed = 0;
  server.on('connection', (socket: Socket) => {
    if (sockets.size >= maxConnections) {
      let victim: Socket | null = null;
      for (const [candidate, state] of sockets) {
        if (state.busy === 0) {
          victim = candidate;
          break;
        }
      }
      shed++;
      (victim ?? socket).destroy();
      if (!victim) return;
    }
    const state = { busy: 0 };
    sockets.set(socket, state);
    socket.once('close', () => sockets.delete(socket));
  });
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    const state = sockets.get(request.socket);
    if (!state) return;
    state.busy++;
    // Refreshed: a connection that just served a request is the newest idle one, not the oldest.
    sockets.delete(request.socket);
    sockets.set(request.socket, state);
    response.once('close', () => state.busy--);
  });
  return {
    get open() {
      return sockets.size;
    },
    get shed() {
      return shed;
    },
  };
}
