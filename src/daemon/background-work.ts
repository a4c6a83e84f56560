/**
 * What a daemon runs beside its requests: result recovery (a first pass before the first call),
 * then, once it listens, the stale-run sweeper, reconcile, the webhook dispatcher, the late index
 * build (Postgres) and giving memory back when idle. Each is configured here from the settings;
 * `stop()` stops them all and waits for the passes under way.
 */
import type { Logger } from 'pino';
import { systemClock } from '../clock.js';
import type { Config } from '../config.js';
import type { DaemonInstance } from '../jobs/daemon-instance.js';
import { periodicReconcile } from '../jobs/reconcile.js';
import { createResultRecovery } from '../jobs/result-recovery.js';
import { createStaleRunSweeper } from '../jobs/stale-run-sweeper.js';
import type { Metrics } from '../metrics.js';
import { IDEMPOTENCY_PURGE_INTERVAL_MS } from '../store/idempotency.js';
import { buildLateIndexes, type LateIndexBuild } from '../store/late-indexes.js';
import { VERSION } from '../version.js';
import { WebhookDispatcher } from '../webhooks/dispatcher.js';
import type { OutboundPolicy } from '../webhooks/outbound-policy.js';
import { startIdleMemory, type IdleMemory } from './idle-memory.js';
import type { Stores } from './stores.js';

export interface BackgroundDeps {
  stores: Stores;
  instance: DaemonInstance;
  metrics: Metrics | false;
  /** Where webhooks may go (its port is the one bound, once the daemon listens). */
  webhookPolicy: OutboundPolicy;
  logger: Logger;
}

export interface BackgroundWork {
  /** Ends what a dead daemon (this one's last life, too) left unfinished, and keeps looking. */
  recoverFirst(): Promise<void>;
  /** Starts the rest, once the daemon listens. */
  start(): void;
  stop(): Promise<void>;
}

export function backgroundWork(config: Config, deps: BackgroundDeps): BackgroundWork {
  const recovery = resultRecovery(config, deps);
  const sweeper = staleRunSweeper(config, deps);
  const webhooks = webhookDispatcher(config, deps);
  const reconciler = periodicReconcile({
    db: deps.stores.db,
    counters: deps.stores.counters,
    clock: systemClock,
    logger: deps.logger.child({ component: 'reconcile' }),
    intervalMs: config.reconcileIntervalMs,
  });
  let idleMemory: IdleMemory | null = null;
  let indexes: LateIndexBuild | null = null;
  return {
    recoverFirst: () => recovery.start(),
    start() {
      sweeper.start();
      reconciler.start();
      webhooks.start();
      // The memory a load grew is given back once the daemon is idle (see idle-memory.ts).
      idleMemory = startIdleMemory();
      indexes = config.databaseUrl
        ? buildLateIndexes(config.databaseUrl, deps.logger.child({ component: 'indexes' }))
        : null;
    },
    async stop() {
      idleMemory?.stop();
      await Promise.all([
        sweeper.stop(),
        reconciler.stop(),
        indexes?.stop(),
        // A delivery under way may finish within the grace, as a request may.
        webhooks.stop(config.shutdownGraceMs),
        recovery.stop(),
      ]);
    },
  };
}

function resultRecovery(config: Config, { stores, instance, metrics, logger }: BackgroundDeps) {
  return createResultRecovery({
    db: stores.db,
    counters: stores.counters,
    clock: systemClock,
    logger: logger.child({ component: 'result-recovery' }),
    self: () => instance.id,
    leaseMs: config.daemonLeaseMs,
    // Another daemon's lapsed heartbeat counts once this one has beaten its own for a whole lease:
    // after an outage of Postgres, every heartbeat lapsed, and the live daemons beat again first.
    leaseTrusted: () => instance.healthyForMs() >= config.daemonLeaseMs,
    intervalMs: config.resultRecoveryIntervalMs,
    // One process at a time holds an embedded database (its directory lock): any other is dead.
    othersDead: stores.db.kind === 'embedded',
    onLost: metrics ? (count) => metrics.resultsLost.inc(count) : undefined,
  });
}

function staleRunSweeper(config: Config, { stores, metrics, logger }: BackgroundDeps) {
  return createStaleRunSweeper({
    db: stores.db,
    clock: systemClock,
    logger: logger.child({ component: 'stale-run-sweeper' }),
    idleMs: config.staleRunIdleMs,
    intervalMs: config.staleRunSweepIntervalMs,
    // The same timer purges the idempotency records past their retention, hourly (stop() ends both).
    idempotencyPurgeIntervalMs: IDEMPOTENCY_PURGE_INTERVAL_MS,
    onEnded: metrics ? (count) => metrics.staleRunsEnded.inc(count) : undefined,
  });
}

function webhookDispatcher(config: Config, { stores, webhookPolicy, logger }: BackgroundDeps) {
  return new WebhookDispatcher({
    db: stores.db,
    clock: systemClock,
    logger: logger.child({ component: 'webhooks' }),
    policy: webhookPolicy,
    userAgent: `runguard/${VERSION}`,
    concurrency: config.webhookConcurrency,
    timeoutMs: config.webhookTimeoutMs,
    pollIntervalMs: config.webhookPollIntervalMs,
    retryBaseMs: config.webhookRetryBaseMs,
    maxAgeMs: 24 * 3_600_000,
    scanIntervalMs: config.webhookScanIntervalMs,
    denials: { windowMs: config.webhookDenialWindowMs, settleMs: config.webhookDenialSettleMs },
    thresholdsPpm: config.webhookBudgetThresholds.map((fraction) => Math.round(fraction * 1_000_000)),
    retentionMs: config.webhookRetentionDays * 86_400_000,
  });
}
