/** Who is calling: resolved from a credential by the API's auth hook, read by the service. */

export type CredentialKind = 'key' | 'jwt';

export interface Principal {
  workspaceId: string;
  kind: CredentialKind;
  /** The API key's id, or the account's id for a JWT. */
  subjectId: string;
  /** An API key's role: an `agent` key may only use the run API's agent routes. Absent: admin. */
  role?: KeyRole;
}

export type KeyRole = 'admin' | 'agent';
