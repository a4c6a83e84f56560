/**
 * When to retry and how long to wait: pure functions, no I/O, so they can be tested without a clock.
 */

const INITIAL_RETRY_DELAY_MS = 500;
const MAX_RETRY_DELAY_MS = 8_000;
/** A server asking for a longer pause than this is not worth blocking an agent for; we wait this long at most. */
export const MAX_RETRY_AFTER_MS = 60_000;

/**
 * Whether an HTTP answer is worth another attempt.
 * Other 4xx are the caller's mistake (or a state conflict) and would fail the same way again.
 */
export function isRetryableStatus(status: number): boolean {
  // Request timeout: the server gave up waiting for us; a new attempt may be faster.
  if (status === 408) return true;
  // Rate limited: wait as told and try again.
  if (status === 429) return true;
  // Server failures and unavailable dependencies are usually transient.
  return status >= 500;
}

/**
 * Reads how long the server asked us to wait, in ms, from `retry-after-ms` (non-standard, precise),
 * or `Retry-After` as delta-seconds or an HTTP date. Capped at {@link MAX_RETRY_AFTER_MS}.
 * Returns undefined when absent or unreadable.
 */
export function parseRetryAfter(headers: Headers | undefined, now: number = Date.now()): number | undefined {
  if (!headers) return undefined;
  const fromMs = headers.get('retry-after-ms');
  if (fromMs !== null) {
    const ms = Number(fromMs.trim());
    if (fromMs.trim() !== '' && Number.isFinite(ms) && ms >= 0) return Math.min(ms, MAX_RETRY_AFTER_MS);
  }
  const value = headers.get('retry-after')?.trim();
  if (!value) return undefined;
  if (/^\d+(\.\d+)?$/.test(value)) return Math.min(Number(value) * 1000, MAX_RETRY_AFTER_MS);
  // An HTTP date always names a month; without letters, Date.parse would read "-3" as a year.
  const date = /[a-z]/i.test(value) ? Date.parse(value) : Number.NaN;
  if (Number.isNaN(date)) return undefined;
  // A date in the past means "now".
  return Math.min(Math.max(date - now, 0), MAX_RETRY_AFTER_MS);
}

/**
 * Exponential backoff: 0.5 s, 1 s, 2 s ... capped at 8 s, minus up to 25 % jitter so that many
 * clients failing together do not come back in lockstep.
 * @param retryIndex 0 for the first retry.
 */
export function backoffDelay(retryIndex: number, random: () => number = Math.random): number {
  const base = Math.min(INITIAL_RETRY_DELAY_MS * 2 ** retryIndex, MAX_RETRY_DELAY_MS);
  return base * (1 - random() * 0.25);
}

/** The pause before retry number `retryIndex`: the server's `Retry-After` when given, else backoff. */
export function retryDelay(retryIndex: number, headers: Headers | undefined, random?: () => number): number {
  return parseRetryAfter(headers) ?? backoffDelay(retryIndex, random);
}
