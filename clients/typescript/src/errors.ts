import { explainDenial } from './shared/denial-detail.js';
import { DENY_SENTENCES } from './shared/deny-reasons.js';
import type { DenialDetail, DenyReason, ErrorBody, ValidationIssue } from './types.js';

/** Base class of every error the client throws, so callers can catch the SDK's errors in one place. */
export class GuardError extends Error {
  override name = 'GuardError';
}

/** The client was misconfigured (bad API key format, bad option). Thrown by the constructor. */
export class GuardConfigError extends GuardError {
  override name = 'GuardConfigError';
}

/** A call was made after `close()`, or an in-flight request was aborted by `close()`. */
export class ClientClosedError extends GuardError {
  override name = 'ClientClosedError';
  constructor(message = 'The runguard client is closed.') {
    super(message);
  }
}

/** A helper that needs a current run (`guard.modelCall`, `guard.toolCall`) was called outside `guard.run`. */
export class NoActiveRunError extends GuardError {
  override name = 'NoActiveRunError';
}

/** The server answered with a non-2xx status. Subclasses name the status. */
export class APIError extends GuardError {
  override name = 'APIError';
  /** HTTP status of the answer. */
  readonly status: number;
  /** Human sentence from the error body (`detail`). */
  readonly detail: string;
  /** Machine code from the error body, e.g. `RUN_NOT_RUNNING`; undefined when the body had none. */
  readonly code: string | undefined;
  /** Field-level problems of a 422. */
  readonly errors: ValidationIssue[] | undefined;
  /** The server's `x-request-id`, to quote when reporting a problem. */
  readonly requestId: string | undefined;
  /** Response headers, for anything not surfaced above. */
  readonly headers: Headers | undefined;

  constructor(
    status: number,
    body: Partial<ErrorBody> | undefined,
    headers: Headers | undefined,
    fallbackDetail?: string,
  ) {
    const detail = body?.detail ?? fallbackDetail ?? `HTTP ${status}`;
    const code = body?.code;
    super(`${status} ${code ? `${code}: ` : ''}${detail}`);
    this.status = status;
    this.detail = detail;
    this.code = code;
    this.errors = body?.errors;
    this.requestId = headers?.get('x-request-id') ?? undefined;
    this.headers = headers;
  }

  /** Builds the subclass matching `status`, like openai-node does, so callers can `instanceof`. */
  static generate(
    status: number,
    body: Partial<ErrorBody> | undefined,
    headers: Headers | undefined,
    fallbackDetail?: string,
  ): APIError {
    const ErrorClass = errorClassForStatus(status);
    return new ErrorClass(status, body, headers, fallbackDetail);
  }
}

/** 400: malformed JSON or a semantically bad value. */
export class BadRequestError extends APIError {
  override name = 'BadRequestError';
}
/** 401: missing, invalid or revoked API key. */
export class AuthenticationError extends APIError {
  override name = 'AuthenticationError';
}
/** 403: plan-gated operation or wrong kind of credential. */
export class PermissionDeniedError extends APIError {
  override name = 'PermissionDeniedError';
}
/** 404: unknown id (or an id of another workspace). */
export class NotFoundError extends APIError {
  override name = 'NotFoundError';
}
/** 409: state conflict (`RUN_NOT_RUNNING`, `STEP_ALREADY_FINISHED`, `DUPLICATE_SEQUENCE`). */
export class ConflictError extends APIError {
  override name = 'ConflictError';
}
/** 413: request body over the server's limit. */
export class PayloadTooLargeError extends APIError {
  override name = 'PayloadTooLargeError';
}
/** 422: the body failed schema validation; see `errors`. */
export class ValidationError extends APIError {
  override name = 'ValidationError';
}
/** 429: too many requests (retried automatically, honouring `Retry-After`). */
export class RateLimitError extends APIError {
  override name = 'RateLimitError';
}
/** 5xx: the server failed (retried automatically). */
export class InternalServerError extends APIError {
  override name = 'InternalServerError';
}

type APIErrorClass = new (
  status: number,
  body: Partial<ErrorBody> | undefined,
  headers: Headers | undefined,
  fallbackDetail?: string,
) => APIError;

const ERROR_CLASS_BY_STATUS: ReadonlyMap<number, APIErrorClass> = new Map<number, APIErrorClass>([
  [400, BadRequestError],
  [401, AuthenticationError],
  [403, PermissionDeniedError],
  [404, NotFoundError],
  [409, ConflictError],
  [413, PayloadTooLargeError],
  [422, ValidationError],
  [429, RateLimitError],
]);

function errorClassForStatus(status: number): APIErrorClass {
  if (status >= 500) return InternalServerError;
  return ERROR_CLASS_BY_STATUS.get(status) ?? APIError;
}

/** The request never got an HTTP answer (refused, reset, DNS...). Retried automatically. */
export class APIConnectionError extends GuardError {
  override name = 'APIConnectionError';
  constructor(message = 'Connection error.', options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** One attempt took longer than `timeoutMs`. Retried automatically. */
export class APITimeoutError extends APIConnectionError {
  override name = 'APITimeoutError';
  constructor(message = 'Request timed out.', options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** What was denied: a run start or a step. */
export type BlockedTarget =
  | { kind: 'run'; userId: string; runId: string | undefined }
  | { kind: 'step'; userId: string; runId: string; stepId: string | undefined; stepLabel: string };

/**
 * A guardrail denied a run start or a step. The guarded function was not executed.
 * This is not an HTTP error: the server answered 201 with status `BLOCKED`.
 */
export class GuardBlockedError extends GuardError {
  override name = 'GuardBlockedError';
  /** A readable sentence saying what was blocked and why. */
  readonly reason: string;
  /** The rule's deny code, e.g. `USER_BLOCKED`; null only if the server sent a denial without one. */
  readonly denyReason: DenyReason | null;
  /** Id of the run that was blocked, or inside which a step was blocked. */
  readonly runId: string | undefined;
  /** Id of the stored `BLOCKED` step, when a step was denied. */
  readonly stepId: string | undefined;
  /** The SDK user the run belongs to. */
  readonly userId: string;
  /** The numbers behind the denial (spend, budget, reset time...); null when the daemon sent none. */
  readonly detail: DenialDetail | null;

  constructor(target: BlockedTarget, denyReason: DenyReason | null, detail: DenialDetail | null = null) {
    // The numbers, when there are any: `user daily budget spent: $0.00045 of $0.0004; resets ...`.
    const numbers =
      denyReason && detail && explainDenial(denyReason, detail).includes(':')
        ? `; ${explainDenial(denyReason, detail)}`
        : '';
    const why = denyReason
      ? `${DENY_SENTENCES[denyReason] ?? 'a guardrail denied it'} (${denyReason}${numbers})`
      : 'a guardrail denied it';
    const what =
      target.kind === 'run'
        ? `Run start for user "${target.userId}" was blocked`
        : `${target.stepLabel} in run ${target.runId} was blocked`;
    const reason = `${what}: ${why}.`;
    super(reason);
    this.reason = reason;
    this.denyReason = denyReason;
    this.userId = target.userId;
    this.runId = target.runId;
    this.stepId = target.kind === 'step' ? target.stepId : undefined;
    this.detail = detail;
  }
}
