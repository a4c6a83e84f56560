/** The time as the daemon reads it: one seam, so tests and the bench can set the clock. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };
