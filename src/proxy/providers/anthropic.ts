import { NO_TOKENS, tokensFromUsage, usageFold } from '../../contract/provider-usage.js';
import { asObject, endpointPath, mayHoldUsage, modelNamed, parseJson, withVersionPrefix } from '../json-fields.js';
import { createUsageTracker, type UsageExtractor } from '../usage-tracker.js';
import type { InspectedRequest, ProviderAdapter } from './types.js';

const messagesUsage: UsageExtractor = {
  fromJson: (body) => tokensFromUsage('anthropic', asObject(body)?.usage) ?? NO_TOKENS,
  streamReader() {
    const fold = usageFold('anthropic');
    let model: string | null = null;
    return {
      onEvent(event) {
        if (!mayHoldUsage(event.data)) return; // skips parsing the many deltas
        const data = asObject(parseJson(event.data));
        // `message_start` carries input (and a first output count) and the model, `message_delta`
        // the running output.
        if (data?.type === 'message_start') {
          const message = asObject(data.message);
          fold.add(message?.usage);
          model = modelNamed(message?.model) ?? model;
        } else if (data?.type === 'message_delta') fold.add(data.usage);
      },
      usage: () => fold.tokens() ?? NO_TOKENS,
      model: () => model,
    };
  },
};

/** Only message creation bills tokens; `/v1/messages/count_tokens` and batches do not. */
function isMessages(path: string): boolean {
  return endpointPath(path).endsWith('/messages');
}

/** The top-level names of Anthropic's API, under `/v1`. */
const RESOURCES: ReadonlySet<string> = new Set(['messages', 'models', 'complete', 'files']);

/** Anthropic's error `type` for a status, as its API answers. */
function errorType(status: number): string {
  switch (status) {
    case 401:
      return 'authentication_error';
    case 402:
      return 'billing_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 504:
      return 'timeout_error';
    case 529:
      return 'overloaded_error';
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

/** `details.error_code` is where the SDK reads a machine-readable cause (`err.errorCode`). */
function errorEnvelope(type: string, message: string, code: string): unknown {
  return { type: 'error', error: { type, message, details: { error_code: code } } };
}

export const anthropicAdapter: ProviderAdapter = Object.freeze({
  type: 'anthropic' as const,

  isModelCall: isMessages,

  inspectRequest(_path: string, body: unknown): InspectedRequest {
    const request = asObject(body);
    return {
      model: typeof request?.model === 'string' ? request.model : null,
      stream: request?.stream === true,
    };
  },

  isUnbilled: (path: string) => endpointPath(path).endsWith('/messages/count_tokens'),

  versioned: (path: string) => withVersionPrefix(path, RESOURCES),

  usageTracker(path: string, contentType: string | undefined) {
    return createUsageTracker(isMessages(path) ? messagesUsage : null, contentType);
  },

  denialBody(reason: string, message: string) {
    return errorEnvelope('permission_error', `${message} (${reason})`, reason);
  },

  errorBody(status: number, message: string, code: string) {
    return errorEnvelope(errorType(status), message, code);
  },
});
