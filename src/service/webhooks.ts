/** Webhook endpoints of a workspace: managing them, a test ping, the delivery log and replays. */
import { ApiError } from '../errors.js';
import type { Db } from '../store/db.js';
import {
  deleteEndpoint,
  getEndpoint,
  insertEndpoint,
  listDeliveries,
  listEndpoints,
  recordAttempt,
  replayDelivery,
  updateEndpoint,
  type EndpointChanges,
  type EndpointRow,
  type WebhookFormat,
} from '../store/webhooks.js';
import { checkUrlForm, OutboundRefused, resolveAllowed, type OutboundPolicy } from '../webhooks/outbound-policy.js';
import { body } from '../webhooks/payload.js';
import { attemptDelivery, type AttemptResult } from '../webhooks/sender.js';
import { generateSecret } from '../webhooks/signing.js';
import type { Clock } from '../clock.js';
import { DEFAULT_EVENTS, newEventId, recordEvent, TEST_EVENT } from './webhook-events.js';

export interface WebhookSettings {
  policy: OutboundPolicy;
  timeoutMs: number;
  userAgent: string;
}

export interface NewWebhook {
  url: string;
  events?: string[];
  format?: WebhookFormat;
  description?: string | null;
}

export interface PingResult extends AttemptResult {
  eventId: string;
  deliveryId: string;
}

export class Webhooks {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly settings: WebhookSettings,
  ) {}

  /** The new endpoint with its secret: the only time the secret is shown. */
  async create(workspaceId: string, input: NewWebhook): Promise<EndpointRow> {
    const url = await this.checkUrl(input.url);
    return insertEndpoint(
      this.db,
      {
        workspaceId,
        url,
        description: input.description ?? null,
        events: input.events ?? DEFAULT_EVENTS,
        format: input.format ?? 'standard',
        secret: generateSecret(),
      },
      this.clock.now(),
    );
  }

  list(workspaceId: string): Promise<EndpointRow[]> {
    return listEndpoints(this.db, workspaceId);
  }

  async get(workspaceId: string, id: string): Promise<EndpointRow> {
    const endpoint = await getEndpoint(this.db, workspaceId, id);
    if (!endpoint) throw new ApiError('WEBHOOK_NOT_FOUND');
    return endpoint;
  }

  async update(workspaceId: string, id: string, changes: EndpointChanges): Promise<EndpointRow> {
    const checked = changes.url === undefined ? changes : { ...changes, url: await this.checkUrl(changes.url) };
    const endpoint = await updateEndpoint(this.db, workspaceId, id, checked, this.clock.now());
    if (!endpoint) throw new ApiError('WEBHOOK_NOT_FOUND');
    return endpoint;
  }

  async delete(workspaceId: string, id: string): Promise<void> {
    if (!(await deleteEndpoint(this.db, workspaceId, id))) throw new ApiError('WEBHOOK_NOT_FOUND');
  }

  /**
   * Sends a `webhook.test` event now and answers what the receiver said. It is recorded as a
   * delivery that is already finished: a ping is never retried, and never waits behind the queue.
   */
  async ping(workspaceId: string, id: string): Promise<PingResult> {
    const endpoint = await this.get(workspaceId, id);
    const now = this.clock.now();
    const event = {
      id: newEventId(now),
      type: TEST_EVENT,
      workspace_id: workspaceId,
      created_at: now,
      data: { endpoint_id: endpoint.id },
    };
    const result = await attemptDelivery(
      {
        url: endpoint.url,
        secret: endpoint.secret,
        messageId: event.id,
        body: body(endpoint.format, event),
        timestampSeconds: Math.floor(now.getTime() / 1000),
        userAgent: this.settings.userAgent,
      },
      this.settings.policy,
      this.settings.timeoutMs,
    );
    const ok = result.statusCode !== null && result.statusCode >= 200 && result.statusCode < 300;
    const deliveryId = await this.db.transaction(async (tx) => {
      await recordEvent(tx, workspaceId, TEST_EVENT, event.data, now, { endpointId: endpoint.id, id: event.id });
      const { rows } = await tx.query<{ id: string }>('SELECT id FROM webhook_deliveries WHERE event_id = $1', [
        event.id,
      ]);
      const deliveryId = rows[0]!.id;
      await recordAttempt(tx, {
        deliveryId,
        endpointId: endpoint.id,
        attempt: 1,
        attemptedAt: now,
        statusCode: result.statusCode,
        latencyMs: result.latencyMs,
        error: result.error,
        disableEndpoint: null,
        outcome: { status: ok ? 'delivered' : 'failed', at: this.clock.now() },
      });
      return deliveryId;
    });
    return { ...result, eventId: event.id, deliveryId };
  }

  async deliveries(workspaceId: string, id: string, query: { status: string | null; page: number; perPage: number }) {
    await this.get(workspaceId, id);
    return listDeliveries(this.db, id, query);
  }

  /** Queues the delivery's event again for the endpoint, at the end of its queue. */
  async replay(workspaceId: string, id: string, deliveryId: string): Promise<string> {
    await this.get(workspaceId, id);
    const replayed = await replayDelivery(this.db, id, deliveryId, this.clock.now());
    if (!replayed) throw new ApiError('NOT_FOUND', 'Delivery not found.');
    return replayed;
  }

  /** The URL's form, and where it resolves to now (each attempt checks again). */
  private async checkUrl(raw: string): Promise<string> {
    try {
      const url = checkUrlForm(raw);
      // A name that does not resolve yet is accepted: the receiver may not be up; attempts check.
      await resolveAllowed(url, this.settings.policy).catch((error: unknown) => {
        if (error instanceof OutboundRefused) throw error;
      });
      return url.toString();
    } catch (error) {
      if (error instanceof OutboundRefused) throw new ApiError('WEBHOOK_URL_REFUSED', error.message);
      throw error;
    }
  }
}
