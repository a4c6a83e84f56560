/** SDK users on the wire: what `/v1/users` takes and answers. */
import { Type, type Static } from './typebox.js';
import { Nullable, Page, Timestamp, Usd } from './common.js';

/** A user of the SDK (the `user_id` runs are started for), with today's spend. */
export const SdkUser = Type.Object({
  user_id: Type.String(),
  blocked: Type.Boolean(),
  /** `null`: the workspace's per-user budget applies. */
  daily_budget_usd: Nullable(Type.Number()),
  daily_spend_usd: Type.Number(),
  run_count: Type.Integer(),
  first_seen_at: Timestamp,
  last_seen_at: Timestamp,
});
export type SdkUser = Static<typeof SdkUser>;

export const SdkUserPage = Page(SdkUser);

export const SdkUserListQuery = Type.Object({
  blocked: Type.Optional(Type.Boolean()),
  search: Type.Optional(
    Type.String({ minLength: 1, maxLength: 256, description: 'Users whose id contains this text (any case)' }),
  ),
  page: Type.Integer({ minimum: 1, maximum: 1_000_000, default: 1 }),
  per_page: Type.Integer({ minimum: 1, maximum: 100, default: 50 }),
});
export type SdkUserListQuery = Static<typeof SdkUserListQuery>;

export const SdkUserParams = Type.Object({ user_id: Type.String({ minLength: 1, maxLength: 256 }) });

/** `PUT /v1/users/:user_id`: what is absent is left as it is; a `null` budget removes the user's own. */
export const SdkUserUpdateBody = Type.Object(
  { blocked: Type.Optional(Type.Boolean()), daily_budget_usd: Type.Optional(Nullable(Usd)) },
  { additionalProperties: false },
);
export type SdkUserUpdateBody = Static<typeof SdkUserUpdateBody>;
