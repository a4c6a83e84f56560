import type { TokenFields } from '../../contract/provider-usage.js';

export { NO_TOKENS, type TokenFields } from '../../contract/provider-usage.js';

export type ProviderType = 'openai' | 'anthropic' | 'google';

/** What the guard needs from a request before anything is sent upstream. */
export interface InspectedRequest {
  /** The model named by the request, `null` when it names none (or is not JSON). */
  model: string | null;
  /** The client asked for an SSE stream. */
  stream: boolean;
  /**
   * The body to send upstream instead of the client's, as JSON. Members kept from the client's
   * body should be kept by identity (a spread): a rewrite that only adds members is then spliced
   * into the client's bytes, not re-serialised (`rewrittenBytes`).
   * `undefined`: forward the client's bytes untouched.
   */
  rewrittenBody?: unknown;
}

/**
 * Reads usage from one upstream response while the caller forwards it. It only reads a copy,
 * never throws, and holds at most a bounded amount of memory.
 */
export interface UsageTracker {
  /** Feeds the next chunk of the response body, as forwarded to the client. */
  push(chunk: Uint8Array): void;
  /** Usage seen so far; for a cut stream, what arrived before the cut (a JSON body gives nulls). */
  current(): TokenFields;
  /** Ends the body and returns the final usage. Idempotent. */
  end(): TokenFields;
  /**
   * The model the answer names, as read so far (null: none read): what prices a call whose
   * request named no model.
   */
  model(): string | null;
  /**
   * An error event arrived inside the stream (Anthropic's `error`, the Responses API's `error` or
   * `response.failed`, a chat stream's `{"error": ...}`): a 200 whose call failed.
   */
  streamFailed(): boolean;
}

/** One provider type's view of requests and responses. Stateless, safe to share. */
export interface ProviderAdapter {
  readonly type: ProviderType;
  /**
   * Whether `path` is an endpoint the provider bills by tokens (chat, messages, ...). Such a
   * call's body is read as JSON whatever its content type says, and one that is not a JSON
   * object is refused: forwarded unread, its model and cost would go unseen by every budget.
   */
  isModelCall(path: string): boolean;
  /**
   * @param path the upstream-relative path, e.g. `/v1/chat/completions`, query string allowed
   * @param body the parsed JSON request body (`undefined` when there is none)
   * @throws ProxyRefusal for a request that cannot be answered (Gemini's: no model in its path)
   */
  inspectRequest(path: string, body: unknown): InspectedRequest;
  /**
   * Whether a POST to `path` answers without billing tokens (token counting): it is forwarded
   * without a step, as a GET is. Anything else a client posts is a model call, as far as the
   * guard knows: it may cost.
   */
  isUnbilled(path: string): boolean;
  /**
   * The API's paths as its official SDK sends them: `/v1` added to a path that names one of the
   * API's resources without it (the Vercel AI SDK's base ends in `/v1`, so it posts to
   * `<base>/messages`). Applied only to an upstream configured without a base path.
   */
  versioned(path: string): string;
  /** A fresh tracker for one response to a request on `path`. */
  usageTracker(path: string, contentType: string | undefined): UsageTracker;
  /** Body of a 403 guardrail denial, in the provider's error format so SDKs raise a permission error. */
  denialBody(reason: string, message: string): unknown;
  /** Body of an error the proxy itself answers (upstream unreachable: 502, ...), in the provider's format. */
  errorBody(status: number, message: string, code: string): unknown;
}
