/**
 * One error handler: every failure leaves as the contract's `{detail, code}` body. A 5xx never
 * carries internals (no stack, no SQL); it is logged with the request id instead.
 */
import type { FastifyError, FastifyInstance } from 'fastify';
import { ApiError, type ErrorCode } from '../errors.js';
import { isDatabaseDown } from '../store/db.js';
import { CLIENT_ABORT_MESSAGE, isClientAbort } from './client-abort.js';
import { fieldErrors } from './validation.js';

/** Fastify's own error codes, mapped to the contract's. */
const FASTIFY_CODES: Record<string, ErrorCode> = {
  FST_ERR_CTP_INVALID_JSON_BODY: 'INVALID_JSON',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'INVALID_JSON',
  FST_ERR_CTP_BODY_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'UNSUPPORTED_MEDIA_TYPE',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'BAD_REQUEST',
};

export function toApiError(error: FastifyError & { validationContext?: string }): ApiError {
  if (error instanceof ApiError) return error;
  if (error.validation) {
    return new ApiError('VALIDATION_FAILED', undefined, {
      errors: fieldErrors(error.validationContext ?? 'body', error.validation),
    });
  }
  const mapped = FASTIFY_CODES[error.code];
  if (mapped) return new ApiError(mapped);
  // A SyntaxError from the JSON parser carries a 400 without a code of ours.
  if (error instanceof SyntaxError) return new ApiError('INVALID_JSON');
  // Postgres refuses NUL in text and some escapes in jsonb: the input is invalid, not the server.
  if (error.code === '22P05' || error.code === '22021') {
    return new ApiError('VALIDATION_FAILED', 'Text may not contain NUL characters or invalid Unicode.');
  }
  if (error.statusCode === 429) return new ApiError('RATE_LIMITED', error.message);
  // Before the database's reading of the same codes: the client's socket, not the database's.
  if (isClientAbort(error))
    return new ApiError('BAD_REQUEST', 'The client closed the connection before its request was complete.');
  if (isDatabaseDown(error))
    return new ApiError('SERVICE_UNAVAILABLE', 'The database is unavailable; try again shortly.');
  if (error.statusCode && error.statusCode >= 400 && error.statusCode < 500)
    return new ApiError('BAD_REQUEST', error.message);
  return new ApiError('INTERNAL');
}

export function registerErrorHandler(app: FastifyInstance) {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const apiError = toApiError(error);
    if (apiError.statusCode >= 500 && apiError.code !== 'OVERLOADED')
      request.log.error({ err: error }, 'request failed');
    // Nobody reads the answer; one line without a stack says what happened.
    if (isClientAbort(error)) request.log.info({ code: error.code }, CLIENT_ABORT_MESSAGE);
    if (apiError.code === 'OVERLOADED') void reply.header('retry-after', '1');
    const body: Record<string, unknown> = { detail: apiError.message, code: apiError.code };
    if (apiError.errors) body.errors = apiError.errors;
    void reply.status(apiError.statusCode).send(body);
  });
  app.setNotFoundHandler((request, reply) => {
    void reply
      .status(404)
      .send({ detail: `No route for ${request.method} ${request.url.split('?')[0]}.`, code: 'NOT_FOUND' });
  });
}
