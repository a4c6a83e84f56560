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

const withoutQuery = (path: string): string => {
  const query = path.indexOf('?');
  return query === -1 ? path : path.slice(0, query);
};

/** JSON writes a UTF-16 unit in at most 6 bytes (`\u001f`); a key with a number or a flag in fewer than 64. */
const MAX_BYTES_PER_UNIT = 6;
const MAX_BYTES_PER_FIELD = 64;

/**
 * Whether a summary's JSON could be longer than `maxBytes`, from its texts' lengths: most are far
 * shorter, and are then not written out to be measured (every proxied call has a summary).
 */
function mayExceed(summary: Json, maxBytes: number): boolean {
  let bound = 2;
  for (const key in summary) {
    const value = summary[key];
    bound += MAX_BYTES_PER_FIELD + (typeof value === 'string' ? value.length * MAX_BYTES_PER_UNIT : 0);
  }
  return bound > maxBytes;
}

export function auditSummary(input: AuditInput, options: AuditOptions = {}): Json {
  const maxBytes = options.maxBytes ?? 2048;
  const body = isObject(input.body) ? input.body : {};
  const summary: Json = {
    provider: input.provider,
    method: input.method,
    path: clip(withoutQuery(input.path), 256),
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
  if (mayExceed(summary, maxBytes) && size(summary) > maxBytes) {
    // Only a tiny limit gets here: keep the essentials.
    return { provider: input.provider, model: summary.model, truncated: true };
  }
  return summary;
}
