/** Webhook endpoints of a workspace: managing them, a test ping, the delivery log and replays. */
import type {
  CreatedWebhookEndpoint,
  Page,
  WebhookDelivery,
  WebhookDeliveryQuery,
  WebhookEndpoint,
  WebhookPing,
  WebhookReplay,
} from '../contract/index.js';
import { ApiError } from '../errors.js';
import type { Db } from '../store/db.js';
import {
  deleteEndpoint,
  getEndpoint,
  insertEndpoint,
  listEndpoints,
  updateEndpoint,
  type EndpointChanges,
  type EndpointRow,
  type WebhookFormat,
} from '../store/webhooks.js';
import {
  deliveryIdOfEvent,
  listDeliveries,
  recordAttempt,
  replayDelivery,
  type DeliveryView,
} from '../store/webhook-deliveries.js';
import { checkUrlForm, OutboundRefused, resolveAllowed, type OutboundPolicy } from '../webhooks/outbound-policy.js';
import { body } from '../webhooks/payload.js';
import { attemptDelivery, type AttemptResult } from '../webhooks/sender.js';
import { generateSecret } from '../webhooks/signing.js';
import type { Clock } from '../clock.js';
import { DEFAULT_EVENTS, newEventId, recordEvent, TEST_EVENT } from '../webhooks/webhook-events.js';

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

/** An endpoint as the API shows it: never its secret. */
function endpointView(endpoint: EndpointRow): WebhookEndpoint {
  return {
    id: endpoint.id,
    url: endpoint.url,
    description: endpoint.description,
    events: endpoint.events,
    format: endpoint.format,
    enabled: endpoint.enabled,
    disabled_reason: endpoint.disabled_reason,
    created_at: endpoint.created_at.toISOString(),
    updated_at: endpoint.updated_at.toISOString(),
  };
}

const iso = (date: Date | null) => (date ? date.toISOString() : null);

function deliveryView(delivery: DeliveryView): WebhookDelivery {
  return {
    ...delivery,
    status: delivery.status as WebhookDelivery['status'],
    created_at: delivery.created_at.toISOString(),
    next_attempt_at: iso(delivery.next_attempt_at),
    finished_at: iso(delivery.finished_at),
    attempt_log: delivery.attempt_log.map((attempt) => ({
      ...attempt,
      attempted_at: attempt.attempted_at.toISOString(),
    })),
  };
}

/** The receiver took the event: it answered 2xx. */
const accepted = (result: AttemptResult) =>
  result.statusCode !== null && result.statusCode >= 200 && result.statusCode < 300;

function pingView(result: AttemptResult, eventId: string, deliveryId: string): WebhookPing {
  return {
    ok: accepted(result),
    event_id: eventId,
    delivery_id: deliveryId,
    status_code: result.statusCode,
    latency_ms: result.latencyMs,
    error: result.error,
  };
}

export class Webhooks {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly settings: WebhookSettings,
  ) {}

  /** The new endpoint with its secret: the only time the secret is shown. */
  async create(workspaceId: string, input: NewWebhook): Promise<CreatedWebhookEndpoint> {
    const url = await this.checkUrl(input.url);
    const endpoint = await insertEndpoint(
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
    return { ...endpointView(endpoint), secret: endpoint.secret };
  }

  async list(workspaceId: string): Promise<WebhookEndpoint[]> {
    return (await listEndpoints(this.db, workspaceId)).map(endpointView);
  }

  async get(workspaceId: string, id: string): Promise<WebhookEndpoint> {
    return endpointView(await this.endpoint(workspaceId, id));
  }

  async update(workspaceId: string, id: string, changes: EndpointChanges): Promise<WebhookEndpoint> {
    const checked = changes.url === undefined ? changes : { ...changes, url: await this.checkUrl(changes.url) };
    const endpoint = await updateEndpoint(this.db, workspaceId, id, checked, this.clock.now());
    if (!endpoint) throw new ApiError('WEBHOOK_NOT_FOUND');
    return endpointView(endpoint);
  }

  async delete(workspaceId: string, id: string): Promise<void> {
    if (!(await deleteEndpoint(this.db, workspaceId, id))) throw new ApiError('WEBHOOK_NOT_FOUND');
  }

  /**
   * Sends a `webhook.test` event now and answers what the receiver said. It is recorded as a
   * delivery that is already finished: a ping is never retried, and never waits behind the queue.
   */
  async ping(workspaceId: string, id: string): Promise<WebhookPing> {
    const endpoint = await this.endpoint(workspaceId, id);
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
    const ok = accepted(result);
    const deliveryId = await this.db.transaction(async (tx) => {
      await recordEvent(tx, workspaceId, TEST_EVENT, event.data, now, { endpointId: endpoint.id, id: event.id });
      const deliveryId = await deliveryIdOfEvent(tx, event.id);
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
    return pingView(result, event.id, deliveryId);
  }

  /** The endpoint's deliveries, newest first, with their latest attempts. */
  async deliveries(workspaceId: string, id: string, query: WebhookDeliveryQuery): Promise<Page<WebhookDelivery>> {
    await this.endpoint(workspaceId, id);
    const { items, total } = await listDeliveries(this.db, id, {
      status: query.status ?? null,
      page: query.page,
      perPage: query.per_page,
    });
    return { items: items.map(deliveryView), total, page: query.page, per_page: query.per_page };
  }

  /** Queues the delivery's event again for the endpoint, at the end of its queue. */
  async replay(workspaceId: string, id: string, deliveryId: string): Promise<WebhookReplay> {
    await this.endpoint(workspaceId, id);
    const replayed = await replayDelivery(this.db, id, deliveryId, this.clock.now());
    if (!replayed) throw new ApiError('NOT_FOUND', 'Delivery not found.');
    return { delivery_id: replayed };
  }

  private async endpoint(workspaceId: string, id: string): Promise<EndpointRow> {
    const endpoint = await getEndpoint(this.db, workspaceId, id);
    if (!endpoint) throw new ApiError('WEBHOOK_NOT_FOUND');
    return endpoint;
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
