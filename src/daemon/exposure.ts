/**
 * Defaults that depend on who can reach the daemon's port. Where only this machine can (it
 * listens on loopback), the proxy guards header-less calls with the local key, anyone may
 * register, and MCP servers on private addresses may be called; where others can, none of these
 * holds unless the configuration says so.
 */
import type { Config } from '../config.js';
import type { LocalKeyFile } from './local-key.js';

const LOOPBACK_HOSTS = new Set(['127.0.0.1', '::1', 'localhost']);

/** Whether only this machine can reach the port the daemon listens on. */
function loopbackOnly(config: Pick<Config, 'host'>): boolean {
  return LOOPBACK_HOSTS.has(config.host);
}

/**
 * The key the proxy guards header-less calls with: only when nothing but this machine can reach
 * the port. Configured, else the one bootstrap saved for the CLI (as it is now: regenerated, it
 * is replaced there).
 */
export function proxyDefaultKey(config: Pick<Config, 'host' | 'proxyApiKey'>, localKey: LocalKeyFile): string | null {
  if (!loopbackOnly(config)) return null;
  return config.proxyApiKey ?? localKey.current;
}

/** Who may register when the configuration does not say: anyone only where only this machine can reach the port. */
export function registrationPolicy(config: Pick<Config, 'registration' | 'host'>): 'open' | 'closed' {
  return config.registration ?? (loopbackOnly(config) ? 'open' : 'closed');
}

/**
 * Whether MCP servers on loopback and private addresses may be called. Local MCP servers are
 * common: a daemon only this machine reaches may call them; one reachable from beyond must not
 * become a way into the operator's network unless told so.
 */
export function mcpAllowsPrivate(config: Pick<Config, 'host' | 'mcpAllowPrivate'>): boolean {
  return loopbackOnly(config) || config.mcpAllowPrivate;
}
