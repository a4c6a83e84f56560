import { NO_TOKENS, tokensFromUsage, usageFold, type UsageFormat } from '../../contract/provider-usage.js';
import {
  asObject,
  endpointPath,
  mayHoldUsage,
  modelNamed,
  parseJson,
  withVersionPrefix,
  type JsonObject,
} from '../json-fields.js';
import { createUsageTracker, type UsageExtractor } from '../usage-tracker.js';
import type { InspectedRequest, ProviderAdapter } from './types.js';

/**
 * OpenAI-compatible APIs: OpenAI, Azure-style gateways, vLLM, Ollama. Endpoints are matched by path
 * suffix, as bases differ (`/v1/chat/completions`, `/chat/completions`, `/openai/deployments/x/...`).
 */
type Endpoint = 'chat' | 'completions' | 'responses' | 'embeddings';

function endpointOf(path: string): Endpoint | null {
  const endpoint = endpointPath(path);
  if (endpoint.endsWith('/chat/completions')) return 'chat';
  if (endpoint.endsWith('/completions')) return 'completions';
  // Only creation: `/responses/{id}` retrieves a response already counted.
  if (endpoint.endsWith('/responses')) return 'responses';
  if (endpoint.endsWith('/embeddings')) return 'embeddings';
  return null;
}

/** The top-level names of OpenAI's API, under `/v1`. */
const RESOURCES: ReadonlySet<string> = new Set([
  'chat',
  'completions',
  'responses',
  'embeddings',
  'models',
  'moderations',
  'images',
  'audio',
  'files',
  'uploads',
  'batches',
  'fine_tuning',
  'vector_stores',
  'assistants',
  'threads',
  'conversations',
  'realtime',
]);

/**
 * @param usageOf where an SSE event's parsed data carries usage: chat chunks at `usage` (non-null on
 *   the final chunk with `include_usage`), Responses events at `response.usage` (set on
 *   `response.completed`, `.incomplete` and `.failed`).
 */
function extractor(format: UsageFormat, usageOf: (data: JsonObject) => unknown): UsageExtractor {
  return {
    fromJson: (body) => tokensFromUsage(format, asObject(body)?.usage) ?? NO_TOKENS,
    streamReader() {
      const fold = usageFold(format);
      let model: string | null = null;
      return {
        onEvent(event) {
          // Skips parsing the many deltas; `[DONE]` fails this test too. The event that carries
          // the usage names the model as well (a chat chunk's `model`, a Responses `response.model`).
          if (!mayHoldUsage(event.data)) return;
          const data = asObject(parseJson(event.data));
          if (!data) return;
          fold.add(usageOf(data));
          model = modelNamed(data.model) ?? modelNamed(asObject(data.response)?.model) ?? model;
        },
        usage: () => fold.tokens() ?? NO_TOKENS,
        model: () => model,
      };
    },
  };
}

const extractors: Record<Endpoint, UsageExtractor> = {
  chat: extractor('openai-chat', (data) => data.usage),
  completions: extractor('openai-chat', (data) => data.usage),
  responses: extractor('openai-responses', (data) => asObject(data.response)?.usage),
  embeddings: extractor('openai-embeddings', (data) => data.usage),
};

/** Azure-style paths name the model's deployment instead of the body. */
function deploymentOf(path: string): string | null {
  const parts = endpointPath(path).split('/');
  const at = parts.indexOf('deployments');
  const name = at === -1 ? undefined : parts[at + 1];
  if (!name) return null;
  try {
    return decodeURIComponent(name);
  } catch {
    return name;
  }
}

/**
 * A streamed chat reports usage only when asked: always ask for it. A client's `include_usage:
 * false` is overridden too, or one request option would make its calls free as far as the budgets
 * know; the client then gets the usage chunk (`choices: []`) it would get by asking. Keeps the
 * client's other `stream_options`; an invalid value is left for the upstream to reject.
 */
function withIncludeUsage(request: JsonObject): JsonObject | undefined {
  const options = request.stream_options;
  if (options === undefined || options === null) {
    return { ...request, stream_options: { include_usage: true } };
  }
  const given = asObject(options);
  const asked = given?.include_usage;
  if (!given || asked === true || (asked !== undefined && asked !== null && asked !== false)) return undefined;
  return { ...request, stream_options: { ...given, include_usage: true } };
}

export const openaiAdapter: ProviderAdapter = Object.freeze({
  type: 'openai' as const,

  isModelCall: (path: string) => endpointOf(path) !== null,

  inspectRequest(path: string, body: unknown): InspectedRequest {
    const request = asObject(body);
    const model = typeof request?.model === 'string' ? request.model : deploymentOf(path);
    if (!request) return { model, stream: false };
    const stream = request.stream === true;
    const endpoint = endpointOf(path);
    if (stream && (endpoint === 'chat' || endpoint === 'completions')) {
      const rewrittenBody = withIncludeUsage(request);
      if (rewrittenBody) return { model, stream, rewrittenBody };
    }
    return { model, stream };
  },

  // Counting a Responses input's tokens bills none.
  isUnbilled: (path: string) => endpointPath(path).endsWith('/responses/input_tokens'),

  versioned: (path: string) => withVersionPrefix(path, RESOURCES),

  usageTracker(path: string, contentType: string | undefined) {
    const endpoint = endpointOf(path);
    return createUsageTracker(endpoint ? extractors[endpoint] : null, contentType);
  },

  denialBody(reason: string, message: string) {
    return { error: { type: 'guardrail_denied', code: reason, message, param: null } };
  },

  errorBody(status: number, message: string, code: string) {
    const type = status >= 500 ? 'server_error' : 'invalid_request_error';
    return { error: { type, code, message, param: null } };
  },
});
