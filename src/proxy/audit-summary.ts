/**
 * The step's `input_data` for a proxied call: a bounded description of the request, enough to audit
 * what was asked of which model, never the credential, and no prompt text unless configured.
 */
import type { InspectedRequest } from './providers/index.js';

export interface AuditOptions {
  /** Largest summary, in bytes of JSON. @default 2048 */
  maxBytes?: number;
  /** Add an excerpt of the last message's text. @default false */
  includePrompt?: boolean;
}

export interface AuditInput {
  provider: string;
  method: string;
  /** The upstream-relative path; its query string is dropped (some gateways carry keys there). */
  path: string;
  inspected: InspectedRequest;
  body: unknown;
  bodyBytes: number;
}

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const count = (value: unknown): number | undefined => (Array.isArray(value) ? value.length : undefined);
const int = (value: unknown): number | undefined =>
  typeof value === 'number' && Number.isFinite(value) ? value : undefined;
/**
 * The first `n` UTF-16 units of `text`, one fewer rather than half a character: a lone surrogate
 * makes the JSON one Postgres refuses (and the whole call with it).
 */
const cut = (text: string, n: number): string => {
  const last = text.charCodeAt(n - 1);
  return text.slice(0, last >= 0xd800 && last <= 0xdbff ? n - 1 : n);
};
/** At most `max` units and an ellipsis; lone surrogates the client sent become U+FFFD. */
const clip = (text: string, max: number): string => {
  const whole = text.toWellFormed();
  return whole.length > max ? `${cut(whole, max)}…` : whole;
};

/** Text of the last message (chat `messages`, Anthropic `messages`, Responses `input`). */
function lastMessageText(body: Json): string | undefined {
  const list = Array.isArray(body.messages) ? body.messages : Array.isArray(body.input) ? body.input : undefined;
  const source: unknown = list ? list[list.length - 1] : (body.input ?? body.prompt);
  const content = isObject(source) ? source.content : source;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (isObject(part) && typeof part.text === 'string' ? part.text : ''))
      .join(' ')
      .trim();
  }
  return undefined;
}

export function auditSummary(input: AuditInput, options: AuditOptions = {}): Json {
  const maxBytes = options.maxBytes ?? 2048;
  const body = isObject(input.body) ? input.body : {};
  const summary: Json = {
    provider: input.provider,
    method: input.method,
    path: clip(input.path.split('?')[0] ?? '', 256),
    model: input.inspected.model === null ? null : clip(input.inspected.model, 128),
    stream: input.inspected.stream,
    body_bytes: input.bodyBytes,
  };
  const messages = count(body.messages) ?? count(body.input);
  if (messages !== undefined) summary.messages = messages;
  const maxTokens = int(body.max_tokens) ?? int(body.max_completion_tokens) ?? int(body.max_output_tokens);
  if (maxTokens !== undefined) summary.max_tokens = maxTokens;
  const tools = count(body.tools);
  if (tools !== undefined) summary.tools = tools;
  if (input.inspected.rewrittenBody !== undefined) summary.usage_requested = true;

  const size = (value: Json) => Buffer.byteLength(JSON.stringify(value));
  if (options.includePrompt) {
    const text = lastMessageText(body);
    const room = maxBytes - size(summary) - 32;
    // Bytes, not characters, bound the record: clip generously, then shrink until it fits.
    if (text && room > 0) {
      let excerpt = clip(text, room);
      while (excerpt.length > 0 && size({ ...summary, prompt_excerpt: excerpt }) > maxBytes) {
        excerpt = cut(excerpt, Math.floor(excerpt.length * 0.8));
      }
      if (excerpt) summary.prompt_excerpt = excerpt;
    }
  }
  if (size(summary) > maxBytes) {
    // Only a tiny limit gets here: keep the essentials.
    return { provider: input.provider, model: summary.model, truncated: true };
  }
  return summary;
}
