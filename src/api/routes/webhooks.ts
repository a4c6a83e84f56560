/** Webhook endpoints: create (the secret shown once), list, update, delete, ping, deliveries, replay. */
import { Type } from '../../contract/typebox.js';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import {
  CreatedWebhookEndpoint,
  errorResponses,
  NoBody,
  Page,
  pathUuid,
  WebhookCreateBody,
  WebhookDelivery,
  WebhookDeliveryParams,
  WebhookDeliveryQuery,
  WebhookEndpoint,
  WebhookParams,
  WebhookPing,
  WebhookReplay,
  WebhookUpdateBody,
} from '../../contract/index.js';
import type { Webhooks } from '../../admin/webhooks.js';

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
    async (request) => webhooks.list(request.principal.workspaceId),
  );

  app.post(
    '/v1/webhooks',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'Add an endpoint; its signing secret is in this answer only',
        body: WebhookCreateBody,
        response: { 201: CreatedWebhookEndpoint, ...errorResponses(400, 401, 422) },
      },
    },
    async (request, reply) =>
      reply.status(201).send(await webhooks.create(request.principal.workspaceId, request.body)),
  );

  app.get(
    '/v1/webhooks/:id',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'One endpoint',
        params: WebhookParams,
        response: { 200: WebhookEndpoint, ...errorResponses(401, 404, 422) },
      },
    },
    async (request) => webhooks.get(request.principal.workspaceId, pathUuid(request.params.id)),
  );

  app.patch(
    '/v1/webhooks/:id',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'Change the URL, events, format or description; enable or disable',
        params: WebhookParams,
        body: WebhookUpdateBody,
        response: { 200: WebhookEndpoint, ...errorResponses(400, 401, 404, 422) },
      },
    },
    async (request) => webhooks.update(request.principal.workspaceId, pathUuid(request.params.id), request.body),
  );

  app.delete(
    '/v1/webhooks/:id',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'Remove an endpoint and its deliveries',
        params: WebhookParams,
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
        params: WebhookParams,
        body: NoBody,
        response: {
          200: WebhookPing,
          ...errorResponses(401, 404, 422),
        },
      },
    },
    async (request) => webhooks.ping(request.principal.workspaceId, pathUuid(request.params.id)),
  );

  app.get(
    '/v1/webhooks/:id/deliveries',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: "The endpoint's deliveries, newest first, with their attempts",
        params: WebhookParams,
        querystring: WebhookDeliveryQuery,
        response: {
          200: Page(WebhookDelivery),
          ...errorResponses(401, 404, 422),
        },
      },
    },
    async (request) => webhooks.deliveries(request.principal.workspaceId, pathUuid(request.params.id), request.query),
  );

  app.post(
    '/v1/webhooks/:id/deliveries/:delivery_id/replay',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: "Send a delivery's event again (a new delivery, at the end of the endpoint's queue)",
        params: WebhookDeliveryParams,
        body: NoBody,
        response: { 202: WebhookReplay, ...errorResponses(401, 404, 422) },
      },
    },
    async (request, reply) => {
      const replayed = await webhooks.replay(
        request.principal.workspaceId,
        pathUuid(request.params.id),
        pathUuid(request.params.delivery_id),
      );
      return reply.status(202).send(replayed);
    },
  );
};
