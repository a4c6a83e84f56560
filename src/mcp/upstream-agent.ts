/**
 * The connections to MCP servers: one undici agent whose every connection is checked against the
 * outbound policy first (a loopback, private or reserved address only where the operator allows
 * it) and pinned to the address checked, so a name cannot resolve elsewhere between the check and
 * the connect. Redirects are never followed: no redirect interceptor.
 */
import { isIP } from 'node:net';
import { Agent, buildConnector } from 'undici';
import { resolveAllowed, type OutboundPolicy } from '../webhooks/outbound-policy.js';

export interface McpUpstreamOptions {
  /** @default 10_000 */
  connectTimeoutMs?: number;
  /** Time to an answer's headers: a tool answering JSON answers when it is done. @default 300_000 */
  headersTimeoutMs?: number;
}

export function mcpUpstreamAgent(policy: OutboundPolicy, options: McpUpstreamOptions = {}): Agent {
  const connectTimeout = options.connectTimeoutMs ?? 10_000;
  const connect = buildConnector({ timeout: connectTimeout });
  return new Agent({
    connect: (target, callback) => {
      const url = new URL(`${target.protocol}//${target.hostname}${target.port ? `:${target.port}` : ''}`);
      const host = url.hostname.replace(/^\[|\]$/g, '');
      resolveAllowed(url, policy).then(
        ({ address }) =>
          connect(
            // TLS still checks the certificate against the URL's name (an address has no SNI name).
            { ...target, hostname: address, ...(isIP(host) ? {} : { servername: target.servername ?? host }) },
            callback,
          ),
        (error: unknown) => callback(error instanceof Error ? error : new Error(String(error)), null),
      );
    },
    headersTimeout: options.headersTimeoutMs ?? 300_000,
    // A server's stream may rest for as long as a tool works, or a session idles: no body timeout.
    bodyTimeout: 0,
    keepAliveTimeout: 30_000,
  });
}
