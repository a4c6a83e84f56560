/**
 * The background loops' one helper (src/jobs/periodic.ts), on vitest's fake timers: a pass every
 * period, never two at once, a failure logged and the loop going on, and a stop that waits.
 */
import type { Logger } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { periodic } from '../../../src/jobs/periodic.js';

function recordingLogger() {
  const errors: { fields: unknown; message: string }[] = [];
  const logger = { error: (fields: unknown, message: string) => errors.push({ fields, message }) };
  return { logger: logger as unknown as Logger, errors };
}

/** A pass the test ends when it wants. */
function heldPass() {
  const ends: (() => void)[] = [];
  let started = 0;
  const pass = () => {
    started += 1;
    return new Promise<void>((resolve) => ends.push(resolve));
  };
  return { pass, started: () => started, endAll: () => ends.splice(0).forEach((end) => end()) };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('periodic', () => {
  it('when started, then a pass runs every period, the first one period after the start', async () => {
    const { logger } = recordingLogger();
    let passes = 0;
    const job = periodic({ name: 'count', everyMs: 1_000, pass: async () => void (passes += 1), logger });
    await job.start();
    expect(passes).toBe(0);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(passes).toBe(1);
    await vi.advanceTimersByTimeAsync(3_000);
    expect(passes).toBe(4);
    await job.stop();
  });

  it('when started with immediately, then the first pass runs at once and start resolves after it', async () => {
    const { logger } = recordingLogger();
    let passes = 0;
    const job = periodic({
      name: 'count',
      everyMs: 1_000,
      pass: async () => void (passes += 1),
      logger,
      immediately: true,
    });
    await job.start();
    expect(passes).toBe(1);
    await job.stop();
  });

  it('when a pass outlasts its period, then the ticks meanwhile skip and runNow joins the pass under way', async () => {
    const { logger } = recordingLogger();
    const held = heldPass();
    const job = periodic({ name: 'slow', everyMs: 1_000, pass: held.pass, logger });
    await job.start();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(held.started()).toBe(1);
    const joined = job.runNow();
    expect(held.started()).toBe(1);
    held.endAll();
    await joined;
    await vi.advanceTimersByTimeAsync(1_000);
    expect(held.started()).toBe(2);
    held.endAll();
    await job.stop();
  });

  it('when a pass fails, then the failure is logged, not thrown, and the next period runs again', async () => {
    const { logger, errors } = recordingLogger();
    let passes = 0;
    const job = periodic({
      name: 'flaky pass',
      everyMs: 1_000,
      pass: async () => {
        passes += 1;
        if (passes === 1) throw new Error('database down');
      },
      logger,
    });
    await job.start();
    await vi.advanceTimersByTimeAsync(1_000);
    await expect(job.runNow()).resolves.toBeUndefined();
    expect(errors).toEqual([{ fields: { err: new Error('database down') }, message: 'flaky pass failed' }]);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(passes).toBe(3);
    expect(errors).toHaveLength(1);
    await job.stop();
  });

  it('when stopped during a pass, then stop waits for it, the pass sees stopped, and no pass follows', async () => {
    const { logger } = recordingLogger();
    const held = heldPass();
    const job = periodic({ name: 'slow', everyMs: 1_000, pass: held.pass, logger });
    await job.start();
    await vi.advanceTimersByTimeAsync(1_000);
    let stopDone = false;
    const stopping = job.stop().then(() => (stopDone = true));
    await vi.advanceTimersByTimeAsync(0);
    expect(job.stopped).toBe(true);
    expect(stopDone).toBe(false);
    held.endAll();
    await stopping;
    await vi.advanceTimersByTimeAsync(10_000);
    await job.runNow();
    expect(held.started()).toBe(1);
  });

  it('when the period is 0, then no timer runs a pass: only runNow (and immediately, at the start) does', async () => {
    const { logger } = recordingLogger();
    let passes = 0;
    const job = periodic({
      name: 'manual',
      everyMs: 0,
      pass: async () => void (passes += 1),
      logger,
      immediately: true,
    });
    await job.start();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(passes).toBe(1);
    await job.runNow();
    expect(passes).toBe(2);
    expect(vi.getTimerCount()).toBe(0);
    await job.stop();
  });
});
