/** Test helpers: feed text to incremental readers in awkward pieces. */
import type { TokenFields, UsageTracker } from '../../src/proxy/providers/types.js';

const encoder = new TextEncoder();

export function bytes(text: string): Uint8Array {
  return encoder.encode(text);
}

/** The UTF-8 bytes of `text` cut every `size` bytes, inside multi-byte characters too. */
export function pieces(text: string, size: number): Uint8Array[] {
  const all = bytes(text);
  const out: Uint8Array[] = [];
  for (let i = 0; i < all.length; i += size) out.push(all.subarray(i, i + size));
  return out;
}

/** The UTF-8 bytes of `text` cut in two at byte `at`. */
export function splitAt(text: string, at: number): Uint8Array[] {
  const all = bytes(text);
  return [all.subarray(0, at), all.subarray(at)];
}

/** Builds an SSE stream from `[event, data]` pairs (`event` null: no `event:` line). */
export function sse(events: Array<[string | null, unknown]>): string {
  return events
    .map(([event, data]) => {
      const payload = typeof data === 'string' ? data : JSON.stringify(data);
      return `${event === null ? '' : `event: ${event}\n`}data: ${payload}\n\n`;
    })
    .join('');
}

/** Feeds `chunks` to `tracker` and answers the usage it read at the end. */
export function track(tracker: UsageTracker, chunks: Uint8Array[]): TokenFields {
  for (const chunk of chunks) tracker.push(chunk);
  return tracker.end();
}
