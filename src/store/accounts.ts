/** Dashboard accounts, and the daemon-wide settings shared through the database. */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Queryable } from './db.js';

export interface AccountRow {
  id: string;
  /** Null for an account a sign-in link created, until its owner names an email and password. */
  email: string | null;
  password_hash: string | null;
  workspace_id: string;
  token_version: number;
  created_at: Date;
}

export async function insertAccount(
  db: Queryable,
  email: string,
  passwordHash: string,
  workspaceId: string,
): Promise<AccountRow> {
  const { rows } = await db.query<AccountRow>(
    `INSERT INTO accounts (id, email, password_hash, workspace_id) VALUES ($1, $2, $3, $4) RETURNING *`,
    [randomUUID(), email, passwordHash, workspaceId],
  );
  return rows[0]!;
}

export async function findAccountByEmail(db: Queryable, email: string): Promise<AccountRow | null> {
  const { rows } = await db.query<AccountRow>('SELECT * FROM accounts WHERE email = $1', [email]);
  return rows[0] ?? null;
}

export async function findAccount(db: Queryable, id: string): Promise<AccountRow | null> {
  const { rows } = await db.query<AccountRow>('SELECT * FROM accounts WHERE id = $1', [id]);
  return rows[0] ?? null;
}

/** Sets a new password hash and bumps the token version, invalidating earlier tokens. */
export async function changePasswordHash(db: Queryable, id: string, passwordHash: string): Promise<number> {
  const { rows } = await db.query<{ token_version: number }>(
    'UPDATE accounts SET password_hash = $2, token_version = token_version + 1 WHERE id = $1 RETURNING token_version',
    [id, passwordHash],
  );
  return rows[0]!.token_version;
}

/** The workspace's first account: the one a sign-in link signs in as. */
export async function firstAccountOf(db: Queryable, workspaceId: string): Promise<AccountRow | null> {
  const { rows } = await db.query<AccountRow>(
    'SELECT * FROM accounts WHERE workspace_id = $1 ORDER BY created_at, id LIMIT 1',
    [workspaceId],
  );
  return rows[0] ?? null;
}

/** An account without email or password, for a workspace that has none (see migration 13). */
export async function insertUnnamedAccount(db: Queryable, workspaceId: string): Promise<AccountRow> {
  const { rows } = await db.query<AccountRow>(
    'INSERT INTO accounts (id, email, password_hash, workspace_id) VALUES ($1, NULL, NULL, $2) RETURNING *',
    [randomUUID(), workspaceId],
  );
  return rows[0]!;
}

/**
 * Names an unnamed account's owner: only while it has no password (a named account changes its
 * password with the current one). Bumps the token version: the link's session ends with it.
 */
export async function nameAccount(
  db: Queryable,
  id: string,
  email: string,
  passwordHash: string,
): Promise<AccountRow | null> {
  const { rows } = await db.query<AccountRow>(
    `UPDATE accounts SET email = $2, password_hash = $3, token_version = token_version + 1
     WHERE id = $1 AND password_hash IS NULL RETURNING *`,
    [id, email, passwordHash],
  );
  return rows[0] ?? null;
}

/** Ends every session of the account: tokens carry the version they were issued at. */
export async function bumpTokenVersion(db: Queryable, id: string): Promise<void> {
  await db.query('UPDATE accounts SET token_version = token_version + 1 WHERE id = $1', [id]);
}

/**
 * A setting every daemon on the database shares, created once: the first daemon's random value
 * wins and the others read it.
 */
export async function sharedSecret(db: Queryable, key: string): Promise<string> {
  await db.query('INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING', [
    key,
    randomBytes(48).toString('base64url'),
  ]);
  const { rows } = await db.query<{ value: string }>('SELECT value FROM settings WHERE key = $1', [key]);
  return rows[0]!.value;
}
