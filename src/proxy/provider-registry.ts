/**
 * The providers the proxy forwards to, by name, each with its adapter and its own connection pool.
 * Upstream URLs come only from here (configuration), never from a request.
 */
import { createRequire } from 'node:module';
import type { Pool as UndiciPool } from 'undici';
import { adapterFor, type ProviderAdapter, type ProviderType } from './providers/index.js';

/**
 * undici's Pool alone: its index loads all of undici (fetch, WebSocket, caches, mocks), ~3 MB of
 * heap held for the daemon's life, where the proxy calls only `dispatch` and `close`. undici has
 * no `exports` map, so the path is public; test/proxy/provider-registry.test.ts checks it is still
 * the Pool every other import of undici sees.
 */
const Pool = createRequire(import.meta.url)('undici/lib/dispatcher/pool.js') as typeof UndiciPool;

export interface ProviderDefinition {
  name: string;
  type: ProviderType;
  /** Base URL, e.g. `https://api.openai.com` or `http://127.0.0.1:11434/v1`. */
  upstream: string;
  /** What sets the upstream, named when it cannot be reached (`RUNGUARD_OPENAI_UPSTREAM`). */
  setBy?: string;
}

export interface UpstreamOptions {
  /** @default 10_000 */
  connectTimeoutMs?: number;
  /** Time to the response headers. @default 600_000 */
  headersTimeoutMs?: number;
  /** Longest pause between two body chunks. @default 300_000 */
  bodyTimeoutMs?: number;
  /** @default 256 */
  connectionsPerUpstream?: number;
  /** @default 30_000 */
  keepAliveTimeoutMs?: number;
}

export interface Provider {
  readonly name: string;
  readonly type: ProviderType;
  readonly adapter: ProviderAdapter;
  /** `scheme://host:port` of the upstream. */
  readonly origin: string;
  /** The upstream's base path without a trailing slash (`''` for a bare host). */
  readonly basePath: string;
  /** The pool every call to this upstream goes through: keep-alive, pipelining off, back-pressure. */
  readonly pool: UndiciPool;
  /** What sets the upstream (a variable, or the configuration), when known. */
  readonly setBy: string | null;
}

export interface ProviderRegistry {
  get(name: string): Provider | undefined;
  names(): string[];
  /** Each provider's upstream and what sets it, in definition order (what `status` shows). */
  upstreams(): { name: string; type: ProviderType; upstream: string; set_by: string | null }[];
  close(): Promise<void>;
}

export function createProviderRegistry(
  definitions: readonly ProviderDefinition[],
  options: UpstreamOptions = {},
): ProviderRegistry {
  const providers = new Map<string, Provider>();
  for (const definition of definitions) {
    const url = new URL(definition.upstream);
    const pool = new Pool(url.origin, {
      connections: options.connectionsPerUpstream ?? 256,
      connect: { timeout: options.connectTimeoutMs ?? 10_000 },
      headersTimeout: options.headersTimeoutMs ?? 600_000,
      bodyTimeout: options.bodyTimeoutMs ?? 300_000,
      keepAliveTimeout: options.keepAliveTimeoutMs ?? 30_000,
    });
    providers.set(
      definition.name,
      Object.freeze({
        name: definition.name,
        type: definition.type,
        adapter: adapterFor(definition.type),
        origin: url.origin,
        basePath: url.pathname.replace(/\/+$/, ''),
        pool,
        setBy: definition.setBy ?? null,
      }),
    );
  }
  return {
    get: (name) => providers.get(name),
    names: () => [...providers.keys()],
    upstreams: () =>
      [...providers.values()].map((provider) => ({
        name: provider.name,
        type: provider.type,
        upstream: `${provider.origin}${provider.basePath}`,
        set_by: provider.setBy,
      })),
    async close() {
      await Promise.all([...providers.values()].map((provider) => provider.pool.close()));
    },
  };
}

/**
 * The base URL an SDK of this provider's type should be given to reach it through `proxyBase`.
 * OpenAI SDKs append `/chat/completions` to a base that conventionally ends in `/v1`; an upstream
 * configured with a path (an Ollama `.../v1`) already has it. Anthropic SDKs append `/v1/messages`.
 */
export function sdkBaseUrl(provider: Provider, proxyBase: string): string {
  const base = `${proxyBase}/${provider.name}`;
  return provider.type === 'openai' && provider.basePath === '' ? `${base}/v1` : base;
}

/**
 * The path to ask the upstream for, from the path a client asked: each provider's two base-URL
 * conventions reach the same endpoint. A bare-host upstream gets the API's `/v1` where a client
 * left it out (`<base>/messages`, as the Vercel AI SDK sends with a base ending in `/v1`); an
 * upstream whose base path already ends in `/v1` does not get it twice.
 */
export function providerPath(provider: Provider, path: string): string {
  if (provider.basePath === '') return provider.adapter.versioned(path);
  if (provider.basePath.endsWith('/v1') && /^\/v1(\/|$)/.test(path)) return path.slice(3) || '/';
  return path;
}
