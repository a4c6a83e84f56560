/**
 * For files that compare today's counters with all-time records over many seconds on the real
 * clock: a UTC midnight (or month end) inside that window resets the budgets under the test and
 * fails it. Waits the day out when it is that close to its end.
 */
import { setTimeout as sleep } from 'node:timers/promises';

const MS_PER_DAY = 86_400_000;
/** Longer than any of those files takes from its `beforeAll` to its last check. */
const WINDOW_MS = 90_000;

/** Waits past the next UTC midnight when fewer than WINDOW_MS remain before it. */
export async function clearOfUtcMidnight(): Promise<void> {
  const left = MS_PER_DAY - (Date.now() % MS_PER_DAY);
  if (left < WINDOW_MS) await sleep(left + 1_000);
}

/** A `beforeAll` timeout that leaves room for the wait above plus the usual set-up. */
export const MIDNIGHT_HOOK_TIMEOUT_MS = 60_000 + WINDOW_MS + 1_000;
