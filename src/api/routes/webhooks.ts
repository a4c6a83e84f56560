/** Webhook endpoints: create (the secret shown once), list, update, delete, ping, deliveries, replay. */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  CreatedWebhookEndpoint,
  errorResponses,
  NoBody,
  pathUuid,
  UuidParam,
  WebhookDelivery,
  WebhookDeliveryStatus,
  WebhookDescription,
  WebhookEndpoint,
  WebhookEvents,
  WebhookFormat,
  WebhookPing,
  WebhookUrl,
  Page,
  Uuid,
} from '../../contract/index.js';
import type { Webhooks } from '../../service/webhooks.js';
import type { EndpointRow } from '../../store/webhooks.js';

const Params = Type.Object({ id: UuidParam });

function view(e: EndpointRow) {
  return {
    id: e.id,
    url: e.url,
    description: e.description,
    events: e.events,
    format: e.format,
    enabled: e.enabled,
    disabled_reason: e.disabled_reason,
    created_at: e.created_at.toISOString(),
    updated_at: e.updated_at.toISOString(),
  };
}
const iso = (d: Date | null) => (d ? d.toISOString() : null);

export const webhookRoutes: FastifyPluginAsync<{ webhooks: Webhooks }> = async (base, { webhooks }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  const tags = ['webhooks'];

  app.get(
    '/v1/webhooks',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: "The workspace's webhook endpoints (never their secrets)",
        response: { 200: Type.Array(WebhookEndpoint), ...errorResponses(401) },
      },
    },
    async (request) => (await webhooks.list(request.principal.workspaceId)).map(view),
  );

  app.post(
    '/v1/webhooks',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'Add an endpoint; its signing secret is in this answer only',
        body: Type.Object(
          {
            url: WebhookUrl,
            events: Type.Optional(WebhookEvents),
            format: Type.Optional(WebhookFormat),
            description: Type.Optional(WebhookDescription),
          },
          { additionalProperties: false },
        ),
        response: { 201: CreatedWebhookEndpoint, ...errorResponses(400, 401, 422) },
      },
    },
    async (request, reply) => {
      const endpoint = await webhooks.create(request.principal.workspaceId, request.body);
      return reply.status(201).send({ ...view(endpoint), secret: endpoint.secret });
    },
  );

  app.get(
    '/v1/webhooks/:id',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'One endpoint',
        params: Params,
        response: { 200: WebhookEndpoint, ...errorResponses(401, 404, 422) },
      },
    },
    async (request) => view(await webhooks.get(request.principal.workspaceId, pathUuid(request.params.id))),
  );

  app.patch(
    '/v1/webhooks/:id',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'Change the URL, events, format or description; enable or disable',
        params: Params,
        body: Type.Object(
          {
            url: Type.Optional(WebhookUrl),
            events: Type.Optional(WebhookEvents),
            format: Type.Optional(WebhookFormat),
            description: Type.Optional(WebhookDescription),
            enabled: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false },
        ),
        response: { 200: WebhookEndpoint, ...errorResponses(400, 401, 404, 422) },
      },
    },
    async (request) =>
      view(await webhooks.update(request.principal.workspaceId, pathUuid(request.params.id), request.body)),
  );

  app.delete(
    '/v1/webhooks/:id',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'Remove an endpoint and its deliveries',
        params: Params,
        response: { 204: Type.Null(), ...errorResponses(401, 404, 422) },
      },
    },
    async (request, reply) => {
      await webhooks.delete(request.principal.workspaceId, pathUuid(request.params.id));
      return reply.status(204).send(null);
    },
  );

  app.post(
    '/v1/webhooks/:id/test',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'Send a signed webhook.test event now and answer what the receiver said',
        params: Params,
        body: NoBody,
        response: {
          200: WebhookPing,
          ...errorResponses(401, 404, 422),
        },
      },
    },
    async (request) => {
      const r = await webhooks.ping(request.principal.workspaceId, pathUuid(request.params.id));
      return {
        ok: r.statusCode !== null && r.statusCode >= 200 && r.statusCode < 300,
        event_id: r.eventId,
        delivery_id: r.deliveryId,
        status_code: r.statusCode,
        latency_ms: r.latencyMs,
        error: r.error,
      };
    },
  );

  app.get(
    '/v1/webhooks/:id/deliveries',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: "The endpoint's deliveries, newest first, with their attempts",
        params: Params,
        querystring: Type.Object({
          status: Type.Optional(WebhookDeliveryStatus),
          page: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 1 }),
          per_page: Type.Integer({ minimum: 1, maximum: 100, default: 50 }),
        }),
        response: {
          200: Page(WebhookDelivery),
          ...errorResponses(401, 404, 422),
        },
      },
    },
    async (request) => {
      const q = request.query;
      const { items, total } = await webhooks.deliveries(request.principal.workspaceId, pathUuid(request.params.id), {
        status: q.status ?? null,
        page: q.page,
        perPage: q.per_page,
      });
      return {
        items: items.map((d) => ({
          ...d,
          status: d.status as 'pending' | 'delivered' | 'failed',
          created_at: d.created_at.toISOString(),
          next_attempt_at: iso(d.next_attempt_at),
          finished_at: iso(d.finished_at),
          attempt_log: d.attempt_log.map((a) => ({ ...a, attempted_at: a.attempted_at.toISOString() })),
        })),
        total,
        page: q.page,
        per_page: q.per_page,
      };
    },
  );

  app.post(
    '/v1/webhooks/:id/deliveries/:delivery_id/replay',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: "Send a delivery's event again (a new delivery, at the end of the endpoint's queue)",
        params: Type.Object({ id: UuidParam, delivery_id: UuidParam }),
        body: NoBody,
        response: { 202: Type.Object({ delivery_id: Uuid }), ...errorResponses(401, 404, 422) },
      },
    },
    async (request, reply) => {
      const id = await webhooks.replay(
        request.principal.workspaceId,
        pathUuid(request.params.id),
        pathUuid(request.params.delivery_id),
      );
      return reply.status(202).send({ delivery_id: id });
    },
  );
};
