/**
 * One table of the errors the API answers with: a stable code, a status and a default sentence.
 * Code branches on `code`; the error handler turns an ApiError into the contract's `{detail, code}`.
 */

const TABLE = {
  BAD_REQUEST: [400, 'The request is malformed.'],
  INVALID_JSON: [400, 'The request body is not valid JSON.'],
  UNAUTHORIZED: [401, 'Missing or invalid credentials.'],
  PLAN_REQUIRED: [403, 'This feature is not available on the current plan.'],
  FORBIDDEN: [403, 'This credential may not perform this operation.'],
  CROSS_SITE_REFUSED: [403, 'A page of another site may not call runguard from a browser.'],
  WEBHOOK_URL_REFUSED: [400, 'The webhook URL is not allowed.'],
  NOT_FOUND: [404, 'Not found.'],
  WEBHOOK_NOT_FOUND: [404, 'Webhook endpoint not found.'],
  RUN_NOT_FOUND: [404, 'Run not found.'],
  STEP_NOT_FOUND: [404, 'Step not found.'],
  PRICING_NOT_FOUND: [404, 'The workspace has no pricing entry for this model.'],
  API_KEY_NOT_FOUND: [404, 'The workspace has no API key with this id.'],
  USER_NOT_FOUND: [404, 'The workspace has no user with this id.'],
  RUN_NOT_RUNNING: [409, 'The run is not RUNNING.'],
  STEP_ALREADY_FINISHED: [409, 'The step is already finished.'],
  DUPLICATE_SEQUENCE: [409, 'A step with this sequence already exists in the run.'],
  IDEMPOTENCY_KEY_IN_USE: [409, 'A request with this Idempotency-Key is still being processed.'],
  LAST_ACTIVE_KEY: [
    409,
    "This is the workspace's last active API key: issue another (keys regenerate) rather than revoke it.",
  ],
  USER_HAS_COUNTED_RUNS: [
    409,
    'The user has runs that are RUNNING or inside a counted window (this or last UTC day, this UTC month).',
  ],
  CONFLICT: [409, 'The request conflicts with the current state.'],
  PAYLOAD_TOO_LARGE: [413, 'The request body is too large.'],
  MISDIRECTED_REQUEST: [421, 'This daemon does not serve that host name.'],
  UNSUPPORTED_MEDIA_TYPE: [415, 'The request body must be application/json.'],
  VALIDATION_FAILED: [422, 'The request is not valid.'],
  IDEMPOTENCY_KEY_REUSED: [422, 'This Idempotency-Key was used with a different request.'],
  RATE_LIMITED: [429, 'Too many requests.'],
  INTERNAL: [500, 'Internal server error.'],
  SERVICE_UNAVAILABLE: [503, 'A backing service is unavailable.'],
  OVERLOADED: [503, 'The daemon is at capacity; try again shortly.'],
} as const satisfies Record<string, readonly [number, string]>;

export type ErrorCode = keyof typeof TABLE;

export interface FieldError {
  path: string;
  message: string;
}

export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly statusCode: number;
  readonly errors: FieldError[] | undefined;

  constructor(code: ErrorCode, detail?: string, options?: { errors?: FieldError[]; cause?: unknown }) {
    const [status, sentence] = TABLE[code];
    super(detail ?? sentence, { cause: options?.cause });
    this.name = 'ApiError';
    this.code = code;
    this.statusCode = status;
    this.errors = options?.errors;
  }
}

export function isApiError(error: unknown): error is ApiError {
  return error instanceof ApiError;
}
