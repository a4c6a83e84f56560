/**
 * Dashboard accounts on the wire: register, log in, `/v1/auth/me`, a password change, and the
 * dashboard token they answer.
 */
import { Type, type Static } from './typebox.js';
import { Nullable, Timestamp, Uuid } from './common.js';

export const WorkspaceRef = Type.Object({ id: Uuid, name: Type.String(), plan: Type.String() });

/** The logged-in account; `email` is null for the account a sign-in link made, until its owner names one. */
export const Account = Type.Object({
  id: Uuid,
  email: Nullable(Type.String()),
  created_at: Timestamp,
  workspace: WorkspaceRef,
});
export type Account = Static<typeof Account>;

export const Email = Type.String({ format: 'email', maxLength: 254 });
/** A new password; one being checked is only bounded (`maxLength`). */
export const Password = Type.String({ minLength: 8, maxLength: 1024 });

/** A dashboard token (a JWT), as login, register and a sign-in link answer it. */
export const AccessToken = Type.Object({
  access_token: Type.String(),
  token_type: Type.Literal('bearer'),
  expires_in: Type.Integer(),
});
export type AccessToken = Static<typeof AccessToken>;

/** `POST /v1/auth/register`. */
export const RegisterBody = Type.Object(
  {
    email: Email,
    password: Password,
    workspace_name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  },
  { additionalProperties: false },
);
export type RegisterBody = Static<typeof RegisterBody>;

/** The account, its workspace, its first API key (shown once) and a dashboard token. */
export const Registered = Type.Object({
  account: Type.Object({ id: Uuid, email: Type.String(), created_at: Timestamp }),
  workspace: WorkspaceRef,
  api_key: Type.String(),
  ...AccessToken.properties,
});
export type Registered = Static<typeof Registered>;

/** `POST /v1/auth/login`. */
export const LoginBody = Type.Object(
  { email: Type.String({ maxLength: 254 }), password: Type.String({ maxLength: 1024 }) },
  { additionalProperties: false },
);
export type LoginBody = Static<typeof LoginBody>;

/** `POST /v1/auth/password`. */
export const PasswordChangeBody = Type.Object(
  { current_password: Type.String({ maxLength: 1024 }), new_password: Password },
  { additionalProperties: false },
);
export type PasswordChangeBody = Static<typeof PasswordChangeBody>;
