import {
  asObject,
  endpointPath,
  mayHoldUsage,
  modelNamed,
  parseJson,
  tokenCount,
  withVersionPrefix,
} from '../json-fields.js';
import { createUsageTracker, type UsageExtractor } from '../usage-tracker.js';
import type { InspectedRequest, ProviderAdapter, Usage } from './types.js';

/**
 * Anthropic's counters as reported. Its `input_tokens` excludes cache reads and cache writes, both
 * billed as input (at their own prices), so the normalised `promptTokens` is the sum of the three
 * (OpenAI's meaning), with the reads and writes kept apart as its parts. `thinking_tokens` are
 * part of `output_tokens`.
 */
interface Counters {
  input: number | null;
  cacheCreation: number | null;
  cacheRead: number | null;
  output: number | null;
  thinking: number | null;
}

/** Counters are whole-message totals, omitted when they do not apply: overwrite, never add. */
function merge(counters: Counters, value: unknown): Counters {
  const usage = asObject(value);
  if (!usage) return counters;
  return {
    input: tokenCount(usage.input_tokens) ?? counters.input,
    cacheCreation: tokenCount(usage.cache_creation_input_tokens) ?? counters.cacheCreation,
    cacheRead: tokenCount(usage.cache_read_input_tokens) ?? counters.cacheRead,
    output: tokenCount(usage.output_tokens) ?? counters.output,
    thinking: tokenCount(asObject(usage.output_tokens_details)?.thinking_tokens) ?? counters.thinking,
  };
}

function toUsage(counters: Counters): Usage {
  return {
    promptTokens:
      counters.input === null ? null : counters.input + (counters.cacheCreation ?? 0) + (counters.cacheRead ?? 0),
    completionTokens: counters.output,
    cacheReadTokens: counters.cacheRead,
    cacheWriteTokens: counters.cacheCreation,
    reasoningTokens: counters.thinking,
  };
}

const EMPTY: Counters = { input: null, cacheCreation: null, cacheRead: null, output: null, thinking: null };

const messagesUsage: UsageExtractor = {
  fromJson: (body) => toUsage(merge(EMPTY, asObject(body)?.usage)),
  streamReader() {
    let counters = EMPTY;
    let model: string | null = null;
    return {
      onEvent(event) {
        if (!mayHoldUsage(event.data)) return; // skips parsing the many deltas
        const data = asObject(parseJson(event.data));
        // `message_start` carries input (and a first output count) and the model, `message_delta`
        // the running output.
        if (data?.type === 'message_start') {
          const message = asObject(data.message);
          counters = merge(counters, message?.usage);
          model = modelNamed(message?.model) ?? model;
        } else if (data?.type === 'message_delta') counters = merge(counters, data.usage);
      },
      usage: () => toUsage(counters),
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
