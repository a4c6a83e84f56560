import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { APIConnectionError, APIError, APITimeoutError, ClientClosedError, GuardError } from './errors.js';
import { isRetryableStatus, retryDelay } from './retry-policy.js';
import type { ErrorBody } from './types.js';

/** Settled, validated configuration of the transport. */
export interface HttpConfig {
  readonly apiKey: string;
  /** Without a trailing slash. */
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  readonly fetch: typeof fetch;
}

/** One logical API call; retries of it share one idempotency key. */
export interface HttpRequest {
  method: 'GET' | 'POST' | 'PATCH';
  /** Path under the base URL, starting with `/`. */
  path: string;
  body?: unknown;
}

type AttemptResult =
  { ok: true; data: unknown } | { ok: false; error: GuardError; retryable: boolean; headers?: Headers };

const USER_AGENT = `runguard-client-ts (node ${process.version})`;

/**
 * JSON over `fetch` with timeouts, retries and idempotency keys. Knows nothing about runs or steps.
 */
export class HttpClient {
  readonly #config: HttpConfig;
  // Aborting this aborts every in-flight attempt and pending retry pause at once.
  readonly #closeController = new AbortController();

  constructor(config: HttpConfig) {
    this.#config = config;
    // Every in-flight attempt listens on it; many concurrent steps are normal, not a leak.
    setMaxListeners(0, this.#closeController.signal);
  }

  /** True once {@link close} was called. */
  get closed(): boolean {
    return this.#closeController.signal.aborted;
  }

  /** Aborts in-flight requests and refuses new ones. */
  close(): void {
    if (!this.closed) this.#closeController.abort(new ClientClosedError());
  }

  /** Throws {@link ClientClosedError} when the client is closed. */
  assertOpen(): void {
    if (this.closed) throw new ClientClosedError();
  }

  /**
   * Sends the request, retrying connection errors, timeouts, 408, 429 and 5xx up to `maxRetries`
   * times. Resolves with the parsed JSON body of a 2xx answer.
   */
  async request<T>(request: HttpRequest): Promise<T> {
    this.assertOpen();
    // One key per logical call, reused by every retry: a POST whose answer was lost on the way back
    // is then replayed by the server instead of starting a second run or step.
    const idempotencyKey = request.method === 'GET' ? undefined : randomUUID();
    for (let retryIndex = 0; ; retryIndex++) {
      const result = await this.#attempt(request, idempotencyKey, retryIndex);
      if (result.ok) return result.data as T;
      if (!result.retryable || retryIndex >= this.#config.maxRetries) throw result.error;
      await this.#pause(retryDelay(retryIndex, result.headers));
    }
  }

  async #attempt(request: HttpRequest, idempotencyKey: string | undefined, retryCount: number): Promise<AttemptResult> {
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.#config.apiKey}`,
      Accept: 'application/json',
      'User-Agent': USER_AGENT,
      'X-Runguard-Retry-Count': String(retryCount),
    };
    if (request.body !== undefined) headers['Content-Type'] = 'application/json';
    if (idempotencyKey) headers['Idempotency-Key'] = idempotencyKey;

    const controller = new AbortController();
    let timedOut = false;
    const onClose = (): void => controller.abort(new ClientClosedError());
    this.#closeController.signal.addEventListener('abort', onClose, { once: true });
    // The timer covers headers and body: a server that stalls mid-body is as stuck as a silent one.
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort(new APITimeoutError());
    }, this.#config.timeoutMs);

    let response: Response;
    let text: string;
    try {
      response = await this.#config.fetch(`${this.#config.baseUrl}${request.path}`, {
        method: request.method,
        headers,
        body: request.body === undefined ? undefined : JSON.stringify(request.body),
        signal: controller.signal,
      });
      text = await response.text();
    } catch (cause) {
      if (this.closed) throw new ClientClosedError('The runguard client was closed while a request was in flight.');
      if (timedOut) {
        return {
          ok: false,
          retryable: true,
          error: new APITimeoutError(`Request timed out after ${this.#config.timeoutMs} ms.`, { cause }),
        };
      }
      const message = `Connection error to ${this.#config.baseUrl}: ${describeCause(cause)}.`;
      return { ok: false, retryable: true, error: new APIConnectionError(message, { cause }) };
    } finally {
      clearTimeout(timer);
      this.#closeController.signal.removeEventListener('abort', onClose);
    }

    if (response.ok) {
      if (text === '') return { ok: true, data: undefined };
      try {
        return { ok: true, data: JSON.parse(text) as unknown };
      } catch (cause) {
        throw new GuardError(`The server answered ${response.status} with a body that is not JSON.`, { cause });
      }
    }
    const error = APIError.generate(
      response.status,
      parseErrorBody(text),
      response.headers,
      fallbackDetail(response, text),
    );
    return { ok: false, retryable: isRetryableStatus(response.status), error, headers: response.headers };
  }

  #pause(ms: number): Promise<void> {
    const signal = this.#closeController.signal;
    return new Promise((resolve, reject) => {
      if (signal.aborted) {
        reject(new ClientClosedError());
        return;
      }
      const onAbort = (): void => {
        clearTimeout(timer);
        reject(new ClientClosedError());
      };
      const timer = setTimeout(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }
}

/** undici says only "fetch failed"; the useful part (ECONNREFUSED, ECONNRESET...) is in its cause. */
function describeCause(cause: unknown): string {
  if (!(cause instanceof Error)) return String(cause);
  const inner = cause.cause;
  if (inner instanceof Error) {
    const code = (inner as Error & { code?: unknown }).code;
    return `${cause.message} (${typeof code === 'string' ? `${code}: ` : ''}${inner.message})`;
  }
  return cause.message;
}

/** Reads `{detail, code, errors}`, tolerating proxies that answer with HTML or plain text. */
function parseErrorBody(text: string): Partial<ErrorBody> | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  const record = parsed as Record<string, unknown>;
  const body: Partial<ErrorBody> = {};
  if (typeof record['detail'] === 'string') body.detail = record['detail'];
  if (typeof record['code'] === 'string') body.code = record['code'];
  if (Array.isArray(record['errors'])) body.errors = record['errors'] as ErrorBody['errors'];
  return body;
}

function fallbackDetail(response: Response, text: string): string {
  const trimmed = text.trim();
  // Short plain-text bodies (from a proxy in between) say more than the status text; long ones are noise.
  if (trimmed !== '' && trimmed.length <= 200 && !trimmed.startsWith('{')) return trimmed;
  return response.statusText || `HTTP ${response.status}`;
}
