/** SDK users: list with today's spend, block and unblock, per-user daily budgets. */
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { SdkUsers } from '../../admin/sdk-users.js';
import {
  errorResponses,
  SdkUser,
  SdkUserListQuery,
  SdkUserPage,
  SdkUserParams,
  SdkUserUpdateBody,
  UserDeletion,
} from '../schemas.js';
import { actorOf } from '../actor.js';

export const userRoutes: FastifyPluginAsync<{ users: SdkUsers }> = async (base, { users }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/users',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['users'],
        summary: 'SDK users, most recently seen first',
        querystring: SdkUserListQuery,
        response: {
          200: SdkUserPage,
          ...errorResponses(401, 422),
        },
      },
    },
    async (request) => users.list(request.principal.workspaceId, request.query),
  );

  app.put(
    '/v1/users/:user_id',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['users'],
        summary: "Block, unblock or set a user's daily budget (creates users not yet seen)",
        params: SdkUserParams,
        body: SdkUserUpdateBody,
        response: { 200: SdkUser, ...errorResponses(400, 401, 422) },
      },
    },
    async (request) =>
      users.update(actorOf(request.principal), request.principal.workspaceId, request.params.user_id, request.body),
  );

  app.delete(
    '/v1/users/:user_id',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['users'],
        summary:
          "Delete a user's record and runs (409 USER_HAS_COUNTED_RUNS while a run is RUNNING or in a counted window)",
        params: SdkUserParams,
        response: { 200: UserDeletion, ...errorResponses(401, 404, 409) },
      },
    },
    async (request) => users.delete(request.principal.workspaceId, request.params.user_id),
  );
};
