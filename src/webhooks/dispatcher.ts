/**
 * Delivers the outbox, in the background of every daemon. Each tick leases endpoints whose next
 * delivery is due (a lease in Postgres, so each endpoint is delivered to by one daemon at a time
 * and in order), and works through each leased endpoint's queue while its deliveries succeed. A
 * bounded number of endpoints are worked on at once, each attempt with a timeout; nothing here
 * is on the path of a decision or a proxied call. A daemon that dies holding a lease holds it
 * only until it expires: another daemon then delivers what it had not.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { Db } from '../store/db.js';
import { endpointById, type EndpointRow } from '../store/webhooks.js';
import {
  headDelivery,
  leaseDueEndpoints,
  purgeWebhookHistory,
  recordAttempt,
  releaseLease,
  renewLease,
  type AttemptRecord,
  type DueDelivery,
} from '../store/webhook-deliveries.js';
import { parseRetryAfter, retryDelayMs } from './backoff.js';
import type { OutboundPolicy } from './outbound-policy.js';
import { body } from './payload.js';
import { type DenialWindows, scanDenials, scanFailedRuns, scanThresholds } from './scans.js';
import { attemptDelivery, type AttemptResult } from './sender.js';
import { periodic, type Periodic } from '../jobs/periodic.js';

export interface DispatcherOptions {
  db: Db;
  clock: Clock;
  logger: Logger;
  policy: OutboundPolicy;
  userAgent: string;
  /** Endpoints delivered to at once by this daemon. */
  concurrency: number;
  /** One attempt, connect to last byte read. */
  timeoutMs: number;
  /** How often due deliveries are looked for; 0: this daemon delivers nothing (it still writes events). */
  pollIntervalMs: number;
  /** The first retry's delay; each next one doubles (with jitter), up to an hour. */
  retryBaseMs: number;
  /** A delivery not done this long after its event gives up. @default 24 h */
  maxAgeMs: number;
  /** How often thresholds, denial windows and failed runs are scanned for. */
  scanIntervalMs: number;
  /** How denials are counted into `guard.denied` and `tool.denied` events. */
  denials: DenialWindows;
  /** Fractions of a daily budget, in parts per million (0.8 = 800,000). */
  thresholdsPpm: number[];
  /** Finished deliveries and their events are kept this long. */
  retentionMs: number;
}

const PURGE_INTERVAL_MS = 3_600_000;

export class WebhookDispatcher {
  private readonly owner = randomUUID();
  private readonly working = new Set<Promise<void>>();
  /** Aborted when a stop's grace is over: attempts still under way are called off. */
  private stopping = new AbortController();
  private readonly job: Periodic;
  private lastScan = 0;
  private lastPurge = 0;
  private failingSince: number | null = null;
  private lastFailureLog = 0;

  constructor(private readonly options: DispatcherOptions) {
    this.job = periodic({
      name: 'webhook dispatch round',
      everyMs: options.pollIntervalMs,
      pass: () => this.round(),
      logger: options.logger,
    });
  }

  start(): void {
    if (this.stopping.signal.aborted) this.stopping = new AbortController();
    void this.job.start();
  }

  /**
   * Stops leasing; lets attempts under way finish for up to `graceMs` (each is bounded by its own
   * timeout, up to 2 minutes), then calls off those still waiting for their receiver, unrecorded:
   * their deliveries stay due, for the next daemon (a receiver may then see one twice, with the
   * same webhook-id, as after any lost answer). Then releases the leases.
   */
  async stop(graceMs = Infinity): Promise<void> {
    await this.job.stop();
    const timer = Number.isFinite(graceMs) ? setTimeout(() => this.stopping.abort(), graceMs) : undefined;
    try {
      await Promise.all(this.working);
    } finally {
      clearTimeout(timer);
    }
  }

  /** One round: scans when due, then leases what this daemon has room for. Never overlaps itself. */
  tick(): Promise<void> {
    return this.job.runNow();
  }

  private async round(): Promise<void> {
    try {
      await this.dispatchOnce();
      this.failingSince = null;
    } catch (error) {
      // Once when rounds start failing (a database outage), then once a minute: not every poll.
      const now = Date.now();
      if (this.failingSince === null || now - this.lastFailureLog >= 60_000) {
        this.lastFailureLog = now;
        this.options.logger.warn(
          { err: error, failingForMs: this.failingSince === null ? 0 : now - this.failingSince },
          'webhook dispatch round failed',
        );
      }
      this.failingSince ??= now;
    }
  }

  private async dispatchOnce(): Promise<void> {
    if (this.job.stopped) return;
    const now = this.options.clock.now();
    if (now.getTime() - this.lastScan >= this.options.scanIntervalMs) {
      this.lastScan = now.getTime();
      await this.scan(now);
    }
    if (now.getTime() - this.lastPurge >= PURGE_INTERVAL_MS) {
      this.lastPurge = now.getTime();
      await purgeWebhookHistory(this.options.db, new Date(now.getTime() - this.options.retentionMs), now);
    }
    const room = this.options.concurrency - this.working.size;
    if (room <= 0) return;
    const leased = await leaseDueEndpoints(this.options.db, this.owner, now, this.leaseEnd(), room);
    for (const endpointId of leased) {
      const work: Promise<void> = this.work(endpointId)
        .catch((error: unknown) => this.options.logger.warn({ err: error, endpointId }, 'webhook delivery failed'))
        .finally(() => this.working.delete(work));
      this.working.add(work);
    }
  }

  private async scan(now: Date): Promise<void> {
    // Each scan on its own: one failing does not stop the others.
    const scans: [string, () => Promise<number>][] = [
      ['thresholds', () => scanThresholds(this.options.db, now, this.options.thresholdsPpm)],
      ['denials', () => scanDenials(this.options.db, now, this.options.denials)],
      ['failed runs', () => scanFailedRuns(this.options.db, now)],
    ];
    for (const [name, run] of scans) {
      await run().catch((error: unknown) =>
        this.options.logger.warn({ err: error, scan: name }, 'webhook event scan failed'),
      );
    }
  }

  /** Long enough for one attempt and its bookkeeping; renewed before each attempt. */
  private leaseEnd(): Date {
    return new Date(this.options.clock.now().getTime() + this.options.timeoutMs + 5_000);
  }

  /** The endpoint's due deliveries, oldest first, until one must wait (or the daemon stops). */
  private async work(endpointId: string): Promise<void> {
    try {
      while (!this.job.stopped) {
        const endpoint = await endpointById(this.options.db, endpointId);
        if (!endpoint?.enabled) return;
        const delivery = await headDelivery(this.options.db, endpointId, this.options.clock.now());
        if (!delivery) return;
        if (!(await renewLease(this.options.db, endpointId, this.owner, this.leaseEnd()))) return; // taken over: stop
        const result = await this.send(endpoint, delivery);
        if (this.stopping.signal.aborted) return; // called off by the stop: still due, unrecorded
        const record = this.outcome(endpoint, delivery, result);
        await this.options.db.transaction((tx) => recordAttempt(tx, record));
        if (record.outcome.status === 'pending' || record.disableEndpoint) return;
      }
    } finally {
      await releaseLease(this.options.db, endpointId, this.owner).catch(() => {});
    }
  }

  private send(endpoint: EndpointRow, delivery: Pick<DueDelivery, 'event'>): Promise<AttemptResult> {
    const now = this.options.clock.now();
    return attemptDelivery(
      {
        url: endpoint.url,
        secret: endpoint.secret,
        messageId: delivery.event.id,
        body: body(endpoint.format, delivery.event),
        timestampSeconds: Math.floor(now.getTime() / 1000),
        userAgent: this.options.userAgent,
      },
      this.options.policy,
      this.options.timeoutMs,
      this.stopping.signal,
    );
  }

  private outcome(endpoint: EndpointRow, delivery: DueDelivery, result: AttemptResult): AttemptRecord {
    const now = this.options.clock.now();
    const attempt = delivery.attempts + 1;
    const base = {
      deliveryId: delivery.id,
      endpointId: endpoint.id,
      attempt,
      attemptedAt: now,
      statusCode: result.statusCode,
      latencyMs: result.latencyMs,
      error: result.error,
      disableEndpoint: null,
    };
    if (result.statusCode !== null && result.statusCode >= 200 && result.statusCode < 300) {
      return { ...base, outcome: { status: 'delivered', at: now } };
    }
    if (result.statusCode === 410) {
      // The receiver says the endpoint is gone for good: stop sending to it until someone re-enables it.
      return {
        ...base,
        outcome: { status: 'failed', at: now },
        disableEndpoint: `The endpoint answered 410 Gone at ${now.toISOString()}.`,
      };
    }
    const delay = retryDelayMs(attempt, this.options.retryBaseMs, parseRetryAfter(result.retryAfter ?? undefined, now));
    const next = new Date(now.getTime() + delay);
    if (next.getTime() - delivery.created_at.getTime() > this.options.maxAgeMs) {
      return {
        ...base,
        error: `${result.error ?? 'failed'} (gave up after ${attempt} attempts)`,
        outcome: { status: 'failed', at: now },
      };
    }
    return { ...base, outcome: { status: 'pending', nextAttemptAt: next } };
  }
}
