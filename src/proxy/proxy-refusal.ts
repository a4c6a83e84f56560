/**
 * How the proxy says no. A failure before forwarding answers in the provider's own error format,
 * so the caller's SDK raises the error it knows (a 403 from the guard reads as the provider's
 * permission error). `ProxyRefusal` is an answer of the proxy's own, outside the API's error table;
 * anything else thrown is read through that table (`toApiError`).
 */
import type { FastifyBaseLogger, FastifyError } from 'fastify';
import { CLIENT_ABORT_MESSAGE, isClientAbort } from '../api/client-abort.js';
import { toApiError } from '../api/error-handler.js';
import type { Decision } from '../contract/decision.js';
import { denialMessage, denialStatus } from './denial-message.js';
import type { Provider } from './provider-registry.js';

export class ProxyRefusal extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: string,
    message: string,
    /** The step the refusal recorded, if any: the client is told its id. */
    readonly stepId?: string,
    /** A rate limit's 429: when to try again (`Retry-After`). */
    readonly retryAfterSeconds: number | null = null,
  ) {
    super(message);
  }
}

/** The guard denied a run-less call's run (`what` = 'run') or a call's step ('model call'). */
export function denialRefusal(step: { id?: string; decision: Decision }, what: string): ProxyRefusal {
  const { status, retryAfterSeconds } = denialStatus(step.decision);
  const reason = step.decision.reason ?? 'DENIED';
  return new ProxyRefusal(status, reason, denialMessage(what, step.decision), step.id, retryAfterSeconds);
}

/** The answer to a call that failed before forwarding: status, headers and body. */
export interface RefusalAnswer {
  status: number;
  headers: Record<string, string>;
  body: unknown;
}

/**
 * The answer to `error`, in `provider`'s format (in the API's `{detail, code}` when the provider
 * is unknown). A 5xx of our own is logged, never detailed.
 */
export function refusalAnswer(
  error: FastifyError | ProxyRefusal,
  provider: Provider | undefined,
  log: FastifyBaseLogger,
): RefusalAnswer {
  const headers: Record<string, string> = {};
  let status: number;
  let code: string;
  let message: string;
  if (error instanceof ProxyRefusal) {
    [status, code, message] = [error.statusCode, error.code, error.message];
    if (error.stepId) headers['x-runguard-step-id'] = error.stepId;
    if (error.retryAfterSeconds !== null) headers['retry-after'] = String(error.retryAfterSeconds);
  } else {
    const apiError = toApiError(error);
    if (apiError.statusCode >= 500 && apiError.code !== 'OVERLOADED') log.error({ err: error }, 'proxy request failed');
    if (apiError.code === 'OVERLOADED') headers['retry-after'] = '1';
    if (isClientAbort(error)) log.info({ code: error.code }, CLIENT_ABORT_MESSAGE);
    [status, code, message] = [apiError.statusCode, apiError.code, apiError.message];
  }
  // A refusal by the guard does not get better by retrying; SDKs honour this header. A rate
  // limit's 429 does, after its Retry-After.
  if (status < 500 && status !== 429) headers['x-should-retry'] = 'false';
  const body = provider
    ? status === 403 && error instanceof ProxyRefusal
      ? provider.adapter.denialBody(code, message)
      : provider.adapter.errorBody(status, message, code)
    : { detail: message, code };
  return { status, headers, body };
}
