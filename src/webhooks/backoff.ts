/** When a failed delivery is tried again: exponential backoff with jitter, or the receiver's Retry-After. */

/** The longest wait between two attempts (the delivery gives up after its maximum age anyway). */
const MAX_DELAY_MS = 60 * 60_000;

/**
 * The delay after the `attempt`-th failure: base x 2^(attempt-1), at most an hour, with "equal
 * jitter" (between half and all of it), so that endpoints that failed together are not retried
 * together. A Retry-After longer than that wins.
 */
export function retryDelayMs(
  attempt: number,
  baseMs: number,
  retryAfterMs: number | null,
  random: () => number = Math.random,
): number {
  const exponential = Math.min(MAX_DELAY_MS, baseMs * 2 ** Math.min(attempt - 1, 30));
  const jittered = exponential / 2 + random() * (exponential / 2);
  return Math.max(jittered, retryAfterMs ?? 0);
}

/** `Retry-After`: seconds, or an HTTP date; null when absent or unreadable. */
export function parseRetryAfter(value: string | string[] | undefined, now: Date): number | null {
  const text = Array.isArray(value) ? value[0] : value;
  if (!text) return null;
  if (/^\s*\d+\s*$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - now.getTime());
}
