/**
 * Ends as FAILED the RUNNING runs whose client went away: no new step for `idleMs`. That frees
 * their concurrency slots. Safe with any number of daemons sweeping one database: candidates are
 * locked with `FOR UPDATE SKIP LOCKED` and ended by a conditional UPDATE, so exactly one sweeper
 * (or the client's own end call) ends a run; the concurrency count, read from the records, drops
 * at once. A run's activity is its latest step, looked up only for runs started before the idle
 * cutoff (through the run's steps in `steps_run_sequence`: the step insert, on every call,
 * maintains no extra index for the sweep's sake). A step being written holds a lock on its run
 * until it commits, so the sweep skips that run; one that committed after the sweep's first
 * statement began is seen by the second, which looks again once the runs are locked.
 *
 * Its timer also purges the Idempotency-Key records past their retention, at a slower cadence of
 * their own (`idempotencyPurgeIntervalMs`), in batches that purgers on several daemons share
 * (see `purgeExpiredAnswers`). With the sweep off (`intervalMs` 0) the timer runs for the purge alone.
 * At the same cadence it deletes the ended runs past their workspace's retention (`purgeRuns`).
 */
import type { Logger } from 'pino';
import type { Db } from '../store/db.js';
import { endStaleRuns, lockStaleCandidates, type EndedStaleRun } from '../store/stale-runs.js';
import { purgeExpiredAnswers } from '../store/idempotency.js';
import { purgeExpiredRuns } from '../store/deletion.js';
import type { Clock } from '../clock.js';
import { periodic } from './periodic.js';

export type { EndedStaleRun };

export interface StaleRunSweeperOptions {
  db: Db;
  clock: Clock;
  logger: Logger;
  /** A RUNNING run idle (no new step) for this long is stale. */
  idleMs: number;
  /** Time between sweeps; 0: never on a timer (call `sweep()`). */
  intervalMs: number;
  /** Runs ended per statement, so one sweep never holds many row locks. @default 500 */
  batchSize?: number;
  /** Told how many runs a sweep ended (metrics). */
  onEnded?: (count: number) => void;
  /**
   * Time between purges of the Idempotency-Key records past their retention, checked at each tick
   * of the timer (so at least the sweep's `intervalMs` apart while the sweep runs); 0: never on a
   * timer (call `purge()`). @default 0
   */
  idempotencyPurgeIntervalMs?: number;
  /** Idempotency records deleted per statement. @default 5000 */
  idempotencyPurgeBatchSize?: number;
  /** Runs past their workspace's retention deleted per transaction. @default 1000 */
  runPurgeBatchSize?: number;
}

export interface StaleRunSweeper {
  /** Ends every run stale at the clock's now; resolves with the runs this call ended. */
  sweep(): Promise<EndedStaleRun[]>;
  /** Purges the Idempotency-Key records past their retention at the clock's now; resolves with how many. */
  purge(): Promise<number>;
  /** Deletes the ended runs past their workspace's retention at the clock's now; resolves with how many. */
  purgeRuns(): Promise<number>;
  /** Sweeps (and purges) now, then every `intervalMs` (purging when `idempotencyPurgeIntervalMs` has passed). */
  start(): void;
  /** Stops the timer and waits for a sweep or purge in progress (a purge stops after its batch). */
  stop(): Promise<void>;
}

export function createStaleRunSweeper(options: StaleRunSweeperOptions): StaleRunSweeper {
  const { db, clock, logger, idleMs, intervalMs } = options;
  const batchSize = options.batchSize ?? 500;
  const purgeIntervalMs = options.idempotencyPurgeIntervalMs ?? 0;
  /** The timer's period: the sweep's, or the purge's alone when the sweep is off. */
  const period = intervalMs > 0 ? intervalMs : purgeIntervalMs;
  /** The tick the last purge on the timer ran in (performance.now()); none yet: due at the first. */
  let lastPurgeTick = -Infinity;
  const job = periodic({ name: 'stale-run sweep', everyMs: period, pass: housekeeping, logger, immediately: true });

  async function sweep(): Promise<EndedStaleRun[]> {
    const ended: EndedStaleRun[] = [];
    for (;;) {
      const now = clock.now();
      const cutoff = new Date(now.getTime() - idleMs);
      const batch = await db.transaction(async (tx) => {
        const locked = await lockStaleCandidates(tx, cutoff, batchSize);
        if (locked.length === 0) return { candidates: 0, ended: [] };
        return { candidates: locked.length, ended: await endStaleRuns(tx, cutoff, locked, now) };
      });
      ended.push(...batch.ended);
      if (batch.candidates < batchSize || job.stopped) break;
    }
    if (ended.length > 0) {
      logger.info(
        { count: ended.length, idleMs, runIds: ended.slice(0, 20).map((run) => run.id) },
        'ended stale runs as FAILED',
      );
      options.onEnded?.(ended.length);
    }
    return ended;
  }

  async function purge(): Promise<number> {
    const purged = await purgeExpiredAnswers(db, clock.now(), {
      batchSize: options.idempotencyPurgeBatchSize,
      stop: () => job.stopped,
    });
    if (purged > 0) logger.info({ count: purged }, 'purged idempotency records past their retention');
    return purged;
  }

  async function purgeRuns(): Promise<number> {
    const purged = await purgeExpiredRuns(db, clock.now(), {
      batchSize: options.runPurgeBatchSize,
      stop: () => job.stopped,
    });
    if (purged > 0) logger.info({ count: purged }, 'deleted runs past their workspace retention');
    return purged;
  }

  async function housekeeping() {
    const tickAt = performance.now();
    if (intervalMs > 0) await sweep().catch((error: unknown) => logger.error({ err: error }, 'stale-run sweep failed'));
    // Ticks are `period` apart, give or take the timer's jitter: half a period of slack makes the
    // purge run every (purge interval / period)th tick, not one tick late now and then.
    if (purgeIntervalMs > 0 && !job.stopped && tickAt - lastPurgeTick + period / 2 >= purgeIntervalMs) {
      lastPurgeTick = tickAt;
      await purge().catch((error: unknown) => logger.error({ err: error }, 'idempotency record purge failed'));
      if (!job.stopped)
        await purgeRuns().catch((error: unknown) => logger.error({ err: error }, 'run retention purge failed'));
    }
  }

  return {
    sweep,
    purge,
    purgeRuns,
    start() {
      if (period > 0) void job.start();
    },
    stop: () => job.stop(),
  };
}
