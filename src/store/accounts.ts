/** Dashboard accounts, and the daemon-wide settings shared through the database. */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Queryable } from './db.js';

export interface AccountRow {
  id: string;
  email: string;
  password_hash: string;
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
