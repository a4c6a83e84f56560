import { assertApiKey } from './api-key.js';
import { GuardConfigError } from './errors.js';
import type { HttpConfig } from './http.js';
import type { ClientOptions } from './types.js';

/** Where the daemon listens unless told otherwise: loopback, as a sidecar. */
export const DEFAULT_BASE_URL = 'http://127.0.0.1:8787';
export const DEFAULT_TIMEOUT_MS = 60_000;
export const DEFAULT_MAX_RETRIES = 2;

/** An environment variable, where there is an environment (Node, Deno, Bun); undefined elsewhere. */
function readEnv(name: string): string | undefined {
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  const value = env?.[name];
  return value === undefined || value === '' ? undefined : value;
}

/** Validates options once, at construction, so a misconfiguration fails at start-up and not mid-run. */
export function resolveClientOptions(options: ClientOptions): Readonly<HttpConfig> {
  if (typeof options !== 'object' || options === null) {
    throw new GuardConfigError('GuardClient needs an options object: new GuardClient({ apiKey }).');
  }
  // As the provider SDKs read OPENAI_API_KEY: an agent run by `runguard exec` or a shell that
  // exported the key needs no code to pass it.
  const given = options.apiKey !== undefined && options.apiKey !== '';
  const apiKey = given ? options.apiKey : readEnv('RUNGUARD_API_KEY');
  assertApiKey(apiKey, given ? 'the apiKey option' : 'RUNGUARD_API_KEY');

  const baseUrl = (options.baseUrl ?? readEnv('RUNGUARD_URL') ?? DEFAULT_BASE_URL).replace(/\/+$/, '');
  let parsed: URL;
  try {
    parsed = new URL(baseUrl);
  } catch {
    throw new GuardConfigError(`baseUrl is not a valid URL: ${JSON.stringify(options.baseUrl)}.`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new GuardConfigError(`baseUrl must use http or https, got ${parsed.protocol}`);
  }

  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    throw new GuardConfigError(
      `timeoutMs must be a positive number of milliseconds, got ${String(options.timeoutMs)}.`,
    );
  }
  const maxRetries = options.maxRetries ?? DEFAULT_MAX_RETRIES;
  if (!Number.isSafeInteger(maxRetries) || maxRetries < 0) {
    throw new GuardConfigError(`maxRetries must be a non-negative integer, got ${String(options.maxRetries)}.`);
  }
  const fetchImpl = options.fetch ?? globalThis.fetch;
  if (typeof fetchImpl !== 'function') {
    throw new GuardConfigError('No fetch implementation: run on Node 20+ or pass options.fetch.');
  }

  return Object.freeze({ apiKey, baseUrl, timeoutMs, maxRetries, fetch: fetchImpl });
}
