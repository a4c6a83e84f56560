/** Webhook endpoints, their deliveries, and the events they carry, on the wire. */
import { Type, type Static } from './typebox.js';
import { Nullable, Timestamp, Uuid, UuidParam } from './common.js';

export const WEBHOOK_EVENT_TYPES = [
  'budget.threshold',
  'guard.denied',
  'tool.denied',
  'kill_switch.changed',
  'user.blocked',
  'user.unblocked',
  'settings.changed',
  'run.failed',
  'result.lost',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

export const WebhookEvents = Type.Array(Type.Enum([...WEBHOOK_EVENT_TYPES]), {
  minItems: 1,
  maxItems: WEBHOOK_EVENT_TYPES.length,
  uniqueItems: true,
});
export const WebhookFormat = Type.Enum(['standard', 'slack']);
export const WebhookUrl = Type.String({ minLength: 1, maxLength: 2_048 });
export const WebhookDescription = Nullable(Type.String({ maxLength: 500 }));

/** `POST /v1/webhooks`: absent events are the default set, absent format `standard`. */
export const WebhookCreateBody = Type.Object(
  {
    url: WebhookUrl,
    events: Type.Optional(WebhookEvents),
    format: Type.Optional(WebhookFormat),
    description: Type.Optional(WebhookDescription),
  },
  { additionalProperties: false },
);
export type WebhookCreateBody = Static<typeof WebhookCreateBody>;

/** `PATCH /v1/webhooks/:id`: what is absent is left as it is. */
export const WebhookUpdateBody = Type.Object(
  {
    url: Type.Optional(WebhookUrl),
    events: Type.Optional(WebhookEvents),
    format: Type.Optional(WebhookFormat),
    description: Type.Optional(WebhookDescription),
    enabled: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
export type WebhookUpdateBody = Static<typeof WebhookUpdateBody>;

export const WebhookParams = Type.Object({ id: UuidParam });
export const WebhookDeliveryParams = Type.Object({ id: UuidParam, delivery_id: UuidParam });

export const WebhookEndpoint = Type.Object({
  id: Uuid,
  url: Type.String(),
  description: Nullable(Type.String()),
  events: Type.Array(Type.String()),
  format: Type.String(),
  enabled: Type.Boolean(),
  disabled_reason: Nullable(Type.String()),
  created_at: Timestamp,
  updated_at: Timestamp,
});
export type WebhookEndpoint = Static<typeof WebhookEndpoint>;

/** The answer to a create: the only one that holds the secret. */
export const CreatedWebhookEndpoint = Type.Object({ ...WebhookEndpoint.properties, secret: Type.String() });
export type CreatedWebhookEndpoint = Static<typeof CreatedWebhookEndpoint>;

export const WebhookAttempt = Type.Object({
  attempt: Type.Integer(),
  attempted_at: Timestamp,
  status_code: Nullable(Type.Integer()),
  latency_ms: Type.Integer(),
  error: Nullable(Type.String()),
});

export const WebhookDeliveryStatus = Type.Enum(['pending', 'delivered', 'failed']);
export const WebhookDelivery = Type.Object({
  id: Uuid,
  event_id: Type.String(),
  event_type: Type.String(),
  status: WebhookDeliveryStatus,
  attempts: Type.Integer(),
  created_at: Timestamp,
  next_attempt_at: Nullable(Timestamp),
  finished_at: Nullable(Timestamp),
  last_status_code: Nullable(Type.Integer()),
  last_error: Nullable(Type.String()),
  attempt_log: Type.Array(WebhookAttempt),
});
export type WebhookDelivery = Static<typeof WebhookDelivery>;

/** Query of `GET /v1/webhooks/:id/deliveries`. */
export const WebhookDeliveryQuery = Type.Object({
  status: Type.Optional(WebhookDeliveryStatus),
  page: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 1 }),
  per_page: Type.Integer({ minimum: 1, maximum: 100, default: 50 }),
});
export type WebhookDeliveryQuery = Static<typeof WebhookDeliveryQuery>;

/** The answer to a replay (202): the new delivery, at the end of the endpoint's queue. */
export const WebhookReplay = Type.Object({ delivery_id: Uuid });
export type WebhookReplay = Static<typeof WebhookReplay>;

export const WebhookPing = Type.Object({
  ok: Type.Boolean(),
  event_id: Type.String(),
  delivery_id: Uuid,
  status_code: Nullable(Type.Integer()),
  latency_ms: Type.Integer(),
  error: Nullable(Type.String()),
});
export type WebhookPing = Static<typeof WebhookPing>;

/** What a receiver is sent (format `standard`): `data` depends on `type` (docs/webhooks.md). */
export interface WebhookEventEnvelope {
  id: string;
  type: WebhookEventType | 'webhook.test';
  timestamp: string;
  workspace_id: string;
  data: Record<string, unknown>;
}
