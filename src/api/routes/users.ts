/** SDK users: list with today's spend, block and unblock, per-user daily budgets. */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { microsToUsd, usdToMicros } from '../../money/decimal.js';
import type { Clock } from '../../clock.js';
import type { GuardSettings } from '../../service/guard-settings.js';
import type { Db } from '../../store/db.js';
import { listUsers, type SdkUserRow } from '../../store/users.js';
import type { CounterStore } from '../../store/counters.js';
import { errorResponses, Nullable, Usd, UserDeletion } from '../schemas.js';
import { actorOf } from '../actor.js';

const User = Type.Object({
  user_id: Type.String(),
  blocked: Type.Boolean(),
  daily_budget_usd: Nullable(Type.Number()),
  daily_spend_usd: Type.Number(),
  run_count: Type.Integer(),
  first_seen_at: Type.String({ format: 'date-time' }),
  last_seen_at: Type.String({ format: 'date-time' }),
});

function view(u: SdkUserRow) {
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
        querystring: Type.Object({
          blocked: Type.Optional(Type.Boolean()),
          search: Type.Optional(
            Type.String({ minLength: 1, maxLength: 256, description: 'Users whose id contains this text (any case)' }),
          ),
          page: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 1 }),
          per_page: Type.Integer({ minimum: 1, maximum: 100, default: 50 }),
        }),
        response: {
          200: Type.Object({
            items: Type.Array(User),
            total: Type.Integer(),
            page: Type.Integer(),
            per_page: Type.Integer(),
          }),
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
        params: Type.Object({ user_id: Type.String({ minLength: 1, maxLength: 256 }) }),
        body: Type.Object(
          { blocked: Type.Optional(Type.Boolean()), daily_budget_usd: Type.Optional(Nullable(Usd)) },
          { additionalProperties: false },
        ),
        response: { 200: User, ...errorResponses(400, 401, 422) },
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
        params: Type.Object({ user_id: Type.String({ minLength: 1, maxLength: 256 }) }),
        response: { 200: UserDeletion, ...errorResponses(401, 404, 409) },
      },
    },
    async (request) => {
      return settings.deleteUser(request.principal.workspaceId, request.params.user_id);
    },
  );
};
