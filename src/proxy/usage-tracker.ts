import { asObject, modelNamed, parseJson } from './json-fields.js';
import { NO_TOKENS, type TokenFields, type UsageTracker } from './providers/types.js';
import { SseDecoder, type SseEvent } from './sse-decoder.js';

/** Folds the events of one SSE response into its usage. */
export interface StreamUsageReader {
  onEvent(event: SseEvent): void;
  usage(): TokenFields;
  /** The model the stream named, as far as read (null: none). */
  model(): string | null;
}

/** How one endpoint reports usage, under a top-level member of a JSON answer (`usage`, Gemini's `usageMetadata`). */
export interface UsageExtractor {
  /** The member a JSON answer's usage is under, read from a body too big to parse whole. @default 'usage' */
  usageKey?: string;
  fromJson(body: unknown): TokenFields;
  streamReader(): StreamUsageReader;
}

export interface UsageTrackerLimits {
  /**
   * Largest JSON body parsed whole. Past it only the last `tailBytes` are kept, and usage is read
   * from the last `"usage"` object there: providers write it last, and big bodies (embeddings) exist.
   * Kept small: parsed whole, a 3 MB embeddings answer held the daemon's thread (every call in
   * flight) ~15-20 ms, and each such call in flight held a copy of its body. The price: a server
   * that writes a large member after `usage` (vLLM's `prompt_logprobs`) has no usage read above it.
   * @default 256 KiB
   */
  maxJsonBytes?: number;
  /** @default 64 KiB */
  tailBytes?: number;
  /**
   * Largest SSE event read. Large because a Responses API `response.completed` event carries the
   * whole response next to its usage.
   * @default 4 MiB
   */
  maxEventLength?: number;
}

const MiB = 1024 * 1024;

export function isEventStream(contentType: string | undefined): boolean {
  return contentType?.split(';')[0]?.trim().toLowerCase() === 'text/event-stream';
}

/** A tracker for one response; `extractor: null` for endpoints that report no usage. */
export function createUsageTracker(
  extractor: UsageExtractor | null,
  contentType: string | undefined,
  limits: UsageTrackerLimits = {},
): UsageTracker {
  if (extractor === null)
    return { push() {}, current: () => NO_TOKENS, end: () => NO_TOKENS, streamFailed: () => false, model: () => null };
  return isEventStream(contentType)
    ? sseTracker(extractor.streamReader(), limits.maxEventLength ?? 4 * MiB)
    : jsonTracker(extractor, limits.maxJsonBytes ?? 256 * 1024, limits.tailBytes ?? 64 * 1024);
}

/** An event that says the call failed, read without parsing: every chunk of a stream passes here. */
const isErrorEvent = (event: SseEvent): boolean =>
  event.event === 'error' || event.event === 'response.failed' || /^\{\s*"error"\s*:/.test(event.data);

function sseTracker(reader: StreamUsageReader, maxEventLength: number): UsageTracker {
  const decoder = new SseDecoder({ maxEventLength });
  let ended = false;
  let failed = false;
  const read = (events: SseEvent[]): void => {
    for (const event of events) {
      if (!failed && isErrorEvent(event)) failed = true;
      try {
        reader.onEvent(event);
      } catch {
        // A reader bug must never break the forwarding it watches.
      }
    }
  };
  return {
    push(chunk) {
      if (!ended) read(decoder.push(chunk));
    },
    current: () => reader.usage(),
    end() {
      if (!ended) {
        ended = true;
        read(decoder.end());
      }
      return reader.usage();
    },
    streamFailed: () => failed,
    model: () => reader.model(),
  };
}

function jsonTracker(extractor: UsageExtractor, maxBytes: number, tailBytes: number): UsageTracker {
  let chunks: Buffer[] = [];
  let size = 0;
  let overflow = false;
  let result: TokenFields | undefined;
  let model: string | null = null;
  return {
    push(chunk) {
      if (result !== undefined) return;
      // A copy: the caller owns and may reuse its buffer. `Buffer.from` copies a small one into
      // Node's shared pool instead of a memory block of its own.
      chunks.push(Buffer.from(chunk));
      size += chunk.length;
      if (size > maxBytes) overflow = true;
      if (!overflow) return;
      while (chunks.length > 1 && size - (chunks[0]?.length ?? 0) >= tailBytes) {
        size -= chunks.shift()?.length ?? 0;
      }
      const excess = size - tailBytes;
      const first = chunks[0];
      if (excess > 0 && first) {
        chunks[0] = first.subarray(excess);
        size -= excess;
      }
    },
    // A JSON body cannot be read before it is whole.
    current: () => result ?? NO_TOKENS,
    end() {
      if (result !== undefined) return result;
      // An answer is mostly one chunk: decoded from its copy, not copied again.
      const text = (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).toString('utf8');
      chunks = [];
      const key = extractor.usageKey ?? 'usage';
      const body = overflow ? { [key]: lastObjectOfKey(text, key) } : parseJson(text);
      // Every provider names the model at the top of a JSON answer (not read past the size bound).
      model = modelNamed(asObject(body)?.model);
      try {
        result = extractor.fromJson(body);
      } catch {
        result = NO_TOKENS;
      }
      return result;
    },
    streamFailed: () => false,
    model: () => model,
  };
}

/**
 * The JSON object value of the last `"key":` in `text`, or `undefined` when that value is not an
 * object. Later keys whose value is a string are passed over: a Responses API body's `metadata`,
 * written after its `usage`, holds strings and may use the same key. Any other value (`null`
 * usage) answers `undefined`, not an object of the same key earlier in the text (a tool's schema
 * may name a property `usage`). One object at most is read, so a hostile body cannot make this
 * scan the text once per key.
 */
export function lastObjectOfKey(text: string, key: string): unknown {
  const quoted = JSON.stringify(key);
  for (let at = text.lastIndexOf(quoted); at !== -1; at = at === 0 ? -1 : text.lastIndexOf(quoted, at - 1)) {
    const start = valueStart(text, at + quoted.length);
    if (start === -1 || text[start] === '"') continue; // not a key, or a string's key
    return text[start] === '{' ? objectFrom(text, start) : undefined;
  }
  return undefined;
}

/** Where the value after `:` at `i` starts (whitespace allowed around the colon), or -1. */
function valueStart(text: string, i: number): number {
  while (/\s/.test(text[i] ?? '')) i++;
  if (text[i++] !== ':') return -1;
  while (/\s/.test(text[i] ?? '')) i++;
  return i < text.length ? i : -1;
}

/** The object starting at `start`, parsed; `undefined` when it does not close or parse. */
function objectFrom(text: string, start: number): unknown {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const char = text[i];
    if (inString) {
      if (char === '\\') i++;
      else if (char === '"') inString = false;
    } else if (char === '"') inString = true;
    else if (char === '{') depth++;
    else if (char === '}' && --depth === 0) return asObject(parseJson(text.slice(start, i + 1)));
  }
  return undefined;
}
