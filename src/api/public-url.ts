/**
 * The daemon's own address for URLs it hands out when no `publicUrl` is configured: the address
 * its socket is bound to, never a request's Host header (which the client writes, and an attacker
 * can make point anywhere). A wildcard bind (0.0.0.0, ::) names no address: the loopback one of
 * its family stands in, as `runguard exec` runs its agent on the daemon's host.
 */
import type { Server } from 'node:http';

export function listenUrl(server: Server): string {
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('The daemon is not listening on a TCP port.');
  let host = address.address;
  if (host === '0.0.0.0') host = '127.0.0.1';
  else if (host === '::') host = '::1';
  return `http://${host.includes(':') ? `[${host}]` : host}:${address.port}`;
}
