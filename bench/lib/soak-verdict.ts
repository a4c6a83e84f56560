/**
 * Issue #49's soak condition, as pure functions: "A 30-minute soak at half the measured maximum:
 * RSS and p99 flat (last 5 minutes within 10% of minutes 5 to 10), no error, every call recorded."
 * bench/lib/soak.ts measures; this decides, so the windows and verdicts can be unit-tested.
 */

/** The issue's soak length; its windows are given for it in minutes. */
export const SOAK_ISSUE_MINUTES = 30;
/** How far the last window may sit from the reference window, as a fraction of the reference. */
export const FLAT_TOLERANCE = 0.1;

/** A window of the soak, in seconds from its start: [from, to). */
export type Window = [fromS: number, toS: number];

export interface SoakWindows {
  /** Minutes 5 to 10 of a 30-minute soak. */
  reference: Window;
  /** Its last 5 minutes. */
  last: Window;
  /** True when the soak is shorter than the issue's and the windows are scaled to it. */
  scaled: boolean;
}

/**
 * The windows compared: minutes 5 to 10 and the last 5 minutes. A soak of 30 minutes or more uses
 * them as the issue writes them; a shorter (trial) soak scales both by its length over 30, so a
 * 3-minute trial compares 0:30-1:00 with 2:30-3:00. The reference starts after the warm-up in both.
 */
export function soakWindows(minutes: number): SoakWindows {
  const lengthS = minutes * 60;
  const scale = minutes >= SOAK_ISSUE_MINUTES ? 1 : minutes / SOAK_ISSUE_MINUTES;
  return {
    reference: [300 * scale, 600 * scale],
    last: [lengthS - 300 * scale, lengthS],
    scaled: scale !== 1,
  };
}

export interface FlatVerdict {
  reference: number;
  last: number;
  /** last / reference. */
  ratio: number;
  /** Within FLAT_TOLERANCE of the reference, either way; false when either figure is missing. */
  pass: boolean;
}

/** "Last 5 minutes within 10% of minutes 5 to 10", read both ways: flat, not only "not grown". */
export function flat(reference: number, last: number, tolerance = FLAT_TOLERANCE): FlatVerdict {
  const ratio = last / reference;
  const pass = Number.isFinite(ratio) && reference > 0 && Math.abs(ratio - 1) <= tolerance + 1e-9;
  return { reference, last, ratio, pass };
}

/** What the daemon recorded of the calls it answered, read from its database after the load. */
export interface RecordedCounts {
  /** Calls the load generator saw answered 2xx. */
  answered: number;
  /** Steps in the soak's run. */
  steps: number;
  /** Of those, steps whose result was written (COMPLETED, finished, with the answer's tokens). */
  withResult: number;
}

/** Every call recorded: one step per call answered, and each step with its result. */
export function everyCallRecorded(counts: RecordedCounts): boolean {
  return counts.answered > 0 && counts.steps === counts.answered && counts.withResult === counts.answered;
}

/** Mean of the values whose time falls in [from, to); NaN when none does. */
export function meanIn<T>(items: readonly T[], at: (item: T) => number, value: (item: T) => number, window: Window) {
  const inside = items.filter((item) => at(item) >= window[0] && at(item) < window[1]);
  return inside.length ? inside.reduce((sum, item) => sum + value(item), 0) / inside.length : NaN;
}
