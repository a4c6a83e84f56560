/**
 * A background loop: a pass every `everyMs`, one pass at a time (a tick that finds the last pass
 * still under way skips), stopped by waiting for the pass under way. A pass that fails is logged,
 * never thrown: the next tick tries again. The timer never keeps the process alive.
 */
import type { Logger } from 'pino';

export interface PeriodicOptions {
  /** What the log says failed. */
  name: string;
  /** Time between passes; 0: never on the timer (only `runNow()`). */
  everyMs: number;
  /** One pass. Long passes check `stopped` between their batches. */
  pass: () => Promise<unknown>;
  logger: Logger;
  /** Whether `start()` runs a pass at once, rather than after the first `everyMs`. @default false */
  immediately?: boolean;
}

export interface Periodic {
  /** Starts the timer (and with `immediately`, a pass now); resolves when that first pass ends. */
  start(): Promise<void>;
  /** A pass now, unless one is under way; resolves when the pass under way ends. */
  runNow(): Promise<void>;
  /** Stops the timer and waits for a pass under way; a pass asked for later does not run. */
  stop(): Promise<void>;
  /** Set by `stop()` (until the next `start()`): a long pass stops after its batch. */
  readonly stopped: boolean;
}

export function periodic(options: PeriodicOptions): Periodic {
  const { name, everyMs, pass, logger } = options;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let stopped = false;

  function runNow(): Promise<void> {
    if (stopped) return running ?? Promise.resolve();
    running ??= pass()
      .then(
        () => undefined,
        (error: unknown) => logger.error({ err: error }, `${name} failed`),
      )
      .finally(() => {
        running = null;
      });
    return running;
  }

  return {
    async start() {
      if (timer) return;
      stopped = false;
      if (everyMs > 0) {
        timer = setInterval(() => void runNow(), everyMs);
        timer.unref();
      }
      if (options.immediately) await runNow();
    },
    runNow,
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      timer = null;
      await running;
    },
    get stopped() {
      return stopped;
    },
  };
}
