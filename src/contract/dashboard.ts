/** What the web dashboard added to the API: sign-in links, the owner, the overview. See docs/dashboard.md. */
import { Type, type Static } from './typebox.js';
import { AccessToken, Email, Password } from './accounts.js';
import { Count, Timestamp } from './common.js';

/** `POST /v1/auth/sign-in-links`. */
export const SignInLink = Type.Object({
  path: Type.String({ description: 'Append to the daemon URL; the token is in the fragment' }),
  token: Type.String(),
  expires_at: Timestamp,
});
export const SignInLinkRedeemBody = Type.Object(
  { token: Type.String({ minLength: 1, maxLength: 256 }) },
  { additionalProperties: false },
);
export const SignInLinkRedeemed = Type.Object({
  ...AccessToken.properties,
  owner_set: Type.Boolean({ description: 'false: the account has no email and password yet' }),
});
/** `POST /v1/auth/owner`. */
export const OwnerBody = Type.Object({ email: Email, password: Password }, { additionalProperties: false });

/** `GET /v1/overview`. */
export const OverviewQuery = Type.Object({ limit: Type.Integer({ minimum: 1, maximum: 100, default: 10 }) });
export const Overview = Type.Object({
  date: Type.String(),
  denials_by_reason: Type.Array(Type.Object({ reason: Type.String(), count: Count })),
  top_users: Type.Array(Type.Object({ user_id: Type.String(), spend_usd: Type.Number(), runs: Count })),
  top_models: Type.Array(Type.Object({ model: Type.String(), spend_usd: Type.Number(), calls: Count, tokens: Count })),
  unpriced_calls: Type.Array(Type.Object({ model: Type.String(), calls: Count, tokens: Count })),
});

export type SignInLink = Static<typeof SignInLink>;
export type SignInLinkRedeemed = Static<typeof SignInLinkRedeemed>;
export type Overview = Static<typeof Overview>;
