/** Dashboard accounts on the wire: the workspace an account belongs to, and `/v1/auth/me`. */
import { Type, type Static } from 'typebox';
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
