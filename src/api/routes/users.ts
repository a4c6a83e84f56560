/** SDK users: list with today's spend, block and unblock, per-user daily budgets. */
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { microsToUsd, usdToMicros } from '../../money/decimal.js';
import type { Clock } from '../../clock.js';
import type { GuardSettings } from '../../service/guard-settings.js';
import type { Db } from '../../store/db.js';
import { listUsers, type SdkUserRow } from '../../store/users.js';
import type { CounterStore } from '../../store/counters.js';
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

function view(u: SdkUserRow): SdkUser {
  return {
    user_id: u.user_id,
    blocked: u.blocked,
    daily_budget_usd: u.daily_budget_micros === null ? null : microsToUsd(u.daily_budget_micros),
    daily_spend_usd: microsToUsd(u.daily_spend_micros),
    run_count: u.run_count,
    first_seen_at: new Date(u.first_seen_at).toISOString(),
    last_seen_at: new Date(u.last_seen_at).toISOString(),
  };
}

const today = (clock: Clock) => clock.now().toISOString().slice(0, 10);

export const userRoutes: FastifyPluginAsync<{
  db: Db;
  counters: CounterStore;
  settings: GuardSettings;
  clock: Clock;
}> = async (base, { db, settings, clock }) => {
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
    async (request) => {
      const q = request.query;
      const { items, total } = await listUsers(db, request.principal.workspaceId, today(clock), {
        blocked: q.blocked ?? null,
        search: q.search ?? null,
        page: q.page,
        perPage: q.per_page,
      });
      return { items: items.map(view), total, page: q.page, per_page: q.per_page };
    },
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
    async (request) => {
      const b = request.body;
      const budget =
        b.daily_budget_usd === undefined
          ? undefined
          : b.daily_budget_usd === null
            ? null
            : usdToMicros(b.daily_budget_usd);
      const user = await settings.updateUser(
        actorOf(request.principal),
        request.principal.workspaceId,
        request.params.user_id,
        { blocked: b.blocked, daily_budget_micros: budget },
      );
      return view(user);
    },
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
    async (request) => {
      return settings.deleteUser(request.principal.workspaceId, request.params.user_id);
    },
  );
};
