/**
 * Crash recovery of proxied calls. A proxied call's step is written before it is forwarded and its
 * result after the answer; a daemon that dies in between (SIGKILL, OOM, a lost host) leaves the
 * step ALLOWED with no cost, and, for a call the proxy started a run for, that run RUNNING, holding a concurrency slot.
 * Every live daemon looks for dead ones (daemon-instances.ts) every `intervalMs`, and at its start:
 * their unfinished steps are ended FAILED RESULT_LOST, charged at their estimate so the spend still
 * counts, each told as a `result.lost` webhook event, and the runs started for those calls are ended. Once
 * an instance is recovered, the Redis copy of today's spend is raised to the records: the results
 * it committed just before it died may have missed their raise of the copy.
 *
 * One transaction per batch: it locks the dead instances' rows (`SKIP LOCKED`: two daemons never
 * recover one instance at once), and each step is taken by a conditional UPDATE (ALLOWED only), so
 * a step is ended, charged and told of once, whoever runs how many passes.
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import { scopeAt, type CounterStore } from '../store/counters/counters.js';
import { lockDeadInstances, markRecovered, purgeDeadInstances } from '../store/daemon-instances.js';
import type { Db } from '../store/db.js';
import { chargeLostSteps, endOrphanedRuns, loseSteps, type LostStep } from '../store/lost-results.js';
import { recordResultLost } from '../webhooks/webhook-events.js';
import { periodic } from './periodic.js';
import { raiseSpendCopies } from './reconcile.js';

/** Why, as the `result.lost` event says it. */
const LOST_REASON = 'the daemon that forwarded the call stopped before it recorded the result';

export interface ResultRecoveryOptions {
  db: Db;
  counters: CounterStore;
  clock: Clock;
  logger: Logger;
  /** This daemon's instance id (never recovered by itself). */
  self: () => number;
  /** A daemon whose heartbeat is older than this is dead. */
  leaseMs: number;
  /**
   * Whether this daemon has reached the database without a break for a whole lease: only then
   * does another's lapsed heartbeat say it is dead. After an outage of the database every
   * heartbeat has lapsed, the live daemons' too, until they beat again. @default always
   */
  leaseTrusted?: () => boolean;
  /** Time between passes; 0: only at start and when `recover()` is called. */
  intervalMs: number;
  /** Every other instance is dead (an embedded database, which one process holds at a time). */
  othersDead: boolean;
  /** Steps ended per transaction. @default 100 */
  batchSize?: number;
  /** Told how many results a pass lost (metrics). */
  onLost?: (count: number) => void;
}

export interface RecoveryPass {
  /** The dead instances this pass found (and locked). */
  instances: number[];
  steps: LostStep[];
  /** Runs started for single proxied calls, ended. */
  runs: number;
}

export interface ResultRecovery {
  /** One pass now: resolves with what it ended. */
  recover(): Promise<RecoveryPass>;
  /** A pass now, then every `intervalMs`; resolves when the first pass has ended (a failure is logged). */
  start(): Promise<void>;
  /** Stops the timer and waits for a pass in progress. */
  stop(): Promise<void>;
}

/** One transaction: up to a batch of lost steps, their events, the runs they free, their charge. */
async function recoverBatch(options: ResultRecoveryOptions, batchSize: number) {
  const now = options.clock.now();
  return options.db.transaction(async (tx) => {
    const instances = await lockDeadInstances(tx, {
      self: options.self(),
      leaseMs: (options.leaseTrusted?.() ?? true) ? options.leaseMs : null,
      othersDead: options.othersDead,
    });
    if (instances.length === 0) {
      return { now, instances, steps: [], runs: [], charged: [], full: false, recovered: [] as number[] };
    }
    const steps = await loseSteps(tx, instances, now, batchSize);
    for (const step of steps) {
      await recordResultLost(
        tx,
        {
          workspaceId: step.workspace_id,
          runId: step.run_id,
          stepId: step.id,
          userId: step.user_id,
          provider: step.provider,
          model: step.model,
          reason: LOST_REASON,
        },
        now,
      );
    }
    const runs = await endOrphanedRuns(tx, instances, now);
    const full = steps.length >= batchSize;
    // Said once, when the last of an instance's steps is ended; later passes look again all the
    // same (a step its late write left behind), until its row is purged.
    const recovered = full ? [] : await markRecovered(tx, instances);
    const charged = await chargeLostSteps(tx, steps, now);
    return { now, instances, steps, runs, charged, full, recovered };
  });
}

export function createResultRecovery(options: ResultRecoveryOptions): ResultRecovery {
  const { db, counters, logger } = options;
  const batchSize = options.batchSize ?? 100;
  let failing = false;
  const job = periodic({
    name: 'crash recovery of proxied calls',
    everyMs: options.intervalMs,
    pass: housekeeping,
    logger,
    immediately: true,
  });

  async function recover(): Promise<RecoveryPass> {
    const pass: RecoveryPass = { instances: [], steps: [], runs: 0 };
    for (;;) {
      const done = await recoverBatch(options, batchSize);
      // The counter copies take the charged totals, as after a result (afterFinish, in
      // step-results.ts): the day's keys of the charge's own day.
      await Promise.all(
        done.charged.map((charge) =>
          counters.spendRecorded(
            scopeAt(done.now, charge.workspace_id, charge.user_id, charge.time_zone),
            charge.totals,
          ),
        ),
      );
      pass.instances = [...new Set([...pass.instances, ...done.instances])];
      pass.steps.push(...done.steps);
      pass.runs += done.runs.length;
      if (done.recovered.length > 0) await raiseSpendCopies(db, counters, done.now);
      if (!done.full || job.stopped) break;
    }
    if (pass.steps.length > 0 || pass.runs > 0) {
      const charged = pass.steps.reduce((sum, step) => sum + (step.cost_micros ?? 0), 0);
      logger.warn(
        {
          instances: pass.instances,
          steps: pass.steps.length,
          unestimated: pass.steps.filter((step) => step.cost_micros === null).length,
          chargedMicros: charged,
          runs: pass.runs,
          stepIds: pass.steps.slice(0, 20).map((step) => step.id),
        },
        'ended the proxied calls of a dead daemon: FAILED RESULT_LOST, charged at their estimate',
      );
      options.onLost?.(pass.steps.length);
    }
    return pass;
  }

  async function housekeeping() {
    try {
      await recover();
      await purgeDeadInstances(db);
      if (failing) logger.info('crash recovery of proxied calls works again');
      failing = false;
    } catch (error) {
      // Logged once while it lasts (a database outage): the next pass tries again.
      if (!failing) logger.error({ err: error }, 'crash recovery of proxied calls failed; retrying');
      failing = true;
    }
  }

  return {
    recover,
    start: () => job.start(),
    stop: () => job.stop(),
  };
}
