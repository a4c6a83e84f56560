/**
 * This daemon process as one of the daemons on its database: registered at start, kept alive by a
 * heartbeat, marked stopped at a clean shutdown. The proxied steps it forwards, and the runs it
 * starts for calls of their own, carry its id: if it dies with them unfinished, another daemon (or
 * this one's next start) ends them (result-recovery.ts).
 *
 * A daemon whose heartbeat could not be written for the lease (a long pause, a partition from
 * Postgres) may have been found dead, and its calls ended: its next beat says so, and it takes a
 * new id for the calls that follow (the results of those in flight are refused, and logged).
 */
import type { Logger } from 'pino';
import type { Db } from '../store/db.js';
import { beat, markStopped, registerInstance } from '../store/daemon-instances.js';
import type { DaemonInstanceId } from '../guard/guard-context.js';
import { periodic } from './periodic.js';

export interface DaemonInstanceOptions {
  db: Db;
  logger: Logger;
  version: string;
  /** Time between heartbeats. */
  heartbeatMs: number;
}

export interface DaemonInstance extends DaemonInstanceId {
  readonly id: number;
  /** How long its heartbeats have been written without a failure (0 while they fail). */
  healthyForMs(): number;
  /** Beats now (tests); the timer beats every `heartbeatMs`. */
  beat(): Promise<void>;
  /** Stops the heartbeat and marks the instance stopped: call once its calls are all recorded. */
  stop(): Promise<void>;
}

export async function startDaemonInstance(options: DaemonInstanceOptions): Promise<DaemonInstance> {
  const { db, logger, version } = options;
  let id = await registerInstance(db, version);
  let failing = false;
  /** Since when (performance.now()) every heartbeat was written; null while they fail. */
  let healthySince: number | null = performance.now();

  async function heartbeat(): Promise<void> {
    try {
      if (!(await beat(db, id))) {
        const lost = id;
        id = await registerInstance(db, version);
        logger.error(
          { instance: lost, newInstance: id },
          'this daemon was found dead (no heartbeat for the lease): its unfinished proxied calls were ended RESULT_LOST by another; it goes on as a new instance',
        );
      }
      if (failing) logger.info({ instance: id }, 'daemon heartbeat written again');
      failing = false;
      healthySince ??= performance.now();
    } catch (error) {
      if (!failing) logger.warn({ err: error, instance: id }, 'daemon heartbeat failed; retrying');
      failing = true;
      healthySince = null;
    }
  }
  const job = periodic({ name: 'daemon heartbeat', everyMs: options.heartbeatMs, pass: heartbeat, logger });
  void job.start();

  return {
    get id() {
      return id;
    },
    healthyForMs() {
      return healthySince === null ? 0 : performance.now() - healthySince;
    },
    beat: () => job.runNow(),
    async stop() {
      await job.stop();
      await markStopped(db, id).catch((error: unknown) =>
        logger.warn({ err: error, instance: id }, 'could not mark this daemon stopped; it is found dead by its lease'),
      );
    },
  };
}
