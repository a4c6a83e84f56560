/** Budgets (`/v1/budgets`): caps on spend by workspace, user, key or tag, per day, week or month. */
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '../../contract/typebox.js';
import type { BudgetsAdmin } from '../../admin/budgets-admin.js';
import {
  Budget,
  BudgetCreateBody,
  BudgetList,
  BudgetListQuery,
  BudgetParams,
  BudgetUpdateBody,
  errorResponses,
  pathUuid,
} from '../schemas.js';

const tags = ['budgets'];

export const budgetRoutes: FastifyPluginAsync<{ budgets: BudgetsAdmin }> = async (base, { budgets }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/budgets',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: "The workspace's budgets, each with its spend and reset in the current window",
        querystring: BudgetListQuery,
        response: { 200: BudgetList, ...errorResponses(401, 422) },
      },
    },
    async (request) => budgets.list(request.principal.workspaceId, request.query),
  );

  app.post(
    '/v1/budgets',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'Create a budget (409 when one of the same scope, subject and period exists)',
        body: BudgetCreateBody,
        response: { 201: Budget, ...errorResponses(400, 401, 409, 422) },
      },
    },
    async (request, reply) => reply.status(201).send(await budgets.create(request.principal.workspaceId, request.body)),
  );

  app.get(
    '/v1/budgets/:id',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'A budget with its spend and reset in the current window',
        params: BudgetParams,
        response: { 200: Budget, ...errorResponses(401, 404, 422) },
      },
    },
    async (request) => budgets.get(request.principal.workspaceId, pathUuid(request.params.id)),
  );

  app.patch(
    '/v1/budgets/:id',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: "Change a budget's period, limit or action (applies from the next decision)",
        params: BudgetParams,
        body: BudgetUpdateBody,
        response: { 200: Budget, ...errorResponses(400, 401, 404, 409, 422) },
      },
    },
    async (request) => budgets.update(request.principal.workspaceId, pathUuid(request.params.id), request.body),
  );

  app.delete(
    '/v1/budgets/:id',
    {
      config: { auth: 'any' },
      schema: {
        tags,
        summary: 'Remove a budget (it stops applying at the next decision)',
        params: BudgetParams,
        response: { 204: Type.Null(), ...errorResponses(401, 404, 422) },
      },
    },
    async (request, reply) => {
      await budgets.remove(request.principal.workspaceId, pathUuid(request.params.id));
      return reply.status(204).send(null);
    },
  );
};
