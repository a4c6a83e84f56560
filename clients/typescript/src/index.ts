/**
 * runguard client SDK: guarded runs and steps for AI agents.
 *
 * @example
 * import { GuardClient, GuardBlockedError, extractors } from 'runguard/client';
 */
export { GuardClient } from './guard-client.js';
export type { RunHandle } from './run-handle.js';
export { extractors, openaiChatCompletions, openaiResponses, anthropicMessages } from './extractors.js';
export { isApiKeyFormat } from './api-key.js';
export { DEFAULT_BASE_URL, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_MS } from './client-options.js';
export {
  GuardError,
  GuardConfigError,
  ClientClosedError,
  NoActiveRunError,
  GuardBlockedError,
  APIError,
  BadRequestError,
  AuthenticationError,
  PermissionDeniedError,
  NotFoundError,
  ConflictError,
  PayloadTooLargeError,
  ValidationError,
  RateLimitError,
  InternalServerError,
  APIConnectionError,
  APITimeoutError,
} from './errors.js';
export type { BlockedTarget } from './errors.js';
export type * from './types.js';
