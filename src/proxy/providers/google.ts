import { NO_TOKENS, tokensFromUsage, type TokenFields } from '../../contract/provider-usage.js';
import { asObject, endpointPath, modelNamed, parseJson } from '../json-fields.js';
import { ProxyRefusal } from '../proxy-refusal.js';
import { createUsageTracker, type UsageExtractor } from '../usage-tracker.js';
import type { InspectedRequest, ProviderAdapter } from './types.js';

/**
 * Google's Gemini API (generativelanguage.googleapis.com): `/{v1,v1beta,v1alpha}/models/{model}:
 * {method}`. The model is named by the path, not the body; the key travels in `x-goog-api-key`
 * or `?key=` and is forwarded as it came (the proxy logs no query string, and the step's path
 * drops it).
 */

/** `/v1beta/models/gemini-2.5-pro:generateContent` (or `tunedModels/...`): the model and the method. */
const MODEL_METHOD = /^\/v1(?:alpha|beta)?\/(models|tunedModels)\/([^/:]+):([A-Za-z]+)$/;

/** Methods that generate or embed, billed by tokens. */
const GENERATING = new Set(['generateContent', 'streamGenerateContent', 'embedContent', 'batchEmbedContents']);
/** A method of a model that bills nothing. */
const COUNTING = 'countTokens';

/** A model-call path's model (`models/x` as `x`) and method; nulls when the path names none. */
function modelCallOf(path: string): { model: string | null; method: string | null } {
  const match = MODEL_METHOD.exec(endpointPath(path));
  if (!match) {
    const method = /:([A-Za-z]+)$/.exec(endpointPath(path))?.[1] ?? null;
    return { model: null, method };
  }
  let model = match[2]!;
  try {
    model = decodeURIComponent(model);
  } catch {
    /* kept as sent */
  }
  return { model: match[1] === 'tunedModels' ? `tunedModels/${model}` : model, method: match[3]! };
}

/**
 * A JSON answer is one response, or (`streamGenerateContent` without `alt=sse`) an array of the
 * chunks, whose usage is cumulative: the last that has one wins.
 */
const USAGE_METADATA = /"usageMetadata"\s*:\s*\{/;

const generateUsage: UsageExtractor = {
  usageKey: 'usageMetadata',
  fromJson(body) {
    const chunks = Array.isArray(body) ? body : [body];
    let latest: TokenFields = NO_TOKENS;
    for (const chunk of chunks) latest = tokensFromUsage('google', asObject(chunk)?.usageMetadata) ?? latest;
    return latest;
  },
  streamReader() {
    let latest: TokenFields = NO_TOKENS;
    let model: string | null = null;
    return {
      onEvent(event) {
        if (!USAGE_METADATA.test(event.data)) return; // text-only chunks need no parsing
        const data = asObject(parseJson(event.data));
        latest = tokensFromUsage('google', data?.usageMetadata) ?? latest;
        model = modelNamed(data?.modelVersion) ?? model;
      },
      usage: () => latest,
      model: () => model,
    };
  },
};

/** Google's `status` for an HTTP status, as its APIs answer. */
function statusName(status: number): string {
  switch (status) {
    case 400:
    case 413:
      return 'INVALID_ARGUMENT';
    case 401:
      return 'UNAUTHENTICATED';
    case 403:
      return 'PERMISSION_DENIED';
    case 404:
      return 'NOT_FOUND';
    case 409:
      return 'ABORTED';
    case 429:
      return 'RESOURCE_EXHAUSTED';
    case 501:
      return 'UNIMPLEMENTED';
    case 502:
    case 503:
      return 'UNAVAILABLE';
    case 504:
      return 'DEADLINE_EXCEEDED';
    default:
      return status >= 500 ? 'INTERNAL' : 'FAILED_PRECONDITION';
  }
}

/** Google's error envelope; the cause's code as an `ErrorInfo` reason, where its clients look for one. */
function errorEnvelope(status: number, message: string, code: string): unknown {
  return {
    error: {
      code: status,
      message,
      status: statusName(status),
      details: [{ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: code, domain: 'runguard' }],
    },
  };
}

export const googleAdapter: ProviderAdapter = Object.freeze({
  type: 'google' as const,

  isModelCall: (path: string) => GENERATING.has(modelCallOf(path).method ?? ''),

  inspectRequest(path: string, _body: unknown): InspectedRequest {
    const { model, method } = modelCallOf(path);
    if (model === null && method !== null && GENERATING.has(method)) {
      throw new ProxyRefusal(
        400,
        'MODEL_MISSING',
        `The path names no model: call /v1beta/models/{model}:${method} (v1 and v1alpha alike).`,
      );
    }
    return { model, stream: method === 'streamGenerateContent' };
  },

  isUnbilled: (path: string) => modelCallOf(path).method === COUNTING,

  // Every Gemini path names its version: there is no convention without one.
  versioned: (path: string) => path,

  usageTracker(path: string, contentType: string | undefined) {
    return createUsageTracker(GENERATING.has(modelCallOf(path).method ?? '') ? generateUsage : null, contentType);
  },

  denialBody(reason: string, message: string) {
    return errorEnvelope(403, message, reason);
  },

  errorBody(status: number, message: string, code: string) {
    return errorEnvelope(status, message, code);
  },
});
