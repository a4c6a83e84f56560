/** One-time dashboard sign-in links: only the token's SHA-256 is stored. */
import { randomBytes } from 'node:crypto';
import type { Queryable } from './db.js';
import { sha256 } from './workspaces.js';

export interface SignInLink {
  /** 256 random bits, URL-safe: shown once, in the link. */
  token: string;
  expiresAt: Date;
}

export async function createSignInLink(
  db: Queryable,
  workspaceId: string,
  now: Date,
  ttlMs: number,
): Promise<SignInLink> {
  const token = randomBytes(32).toString('base64url');
  const expiresAt = new Date(now.getTime() + ttlMs);
  // Links past their expiry are of no use to anyone: each new link clears them.
  await db.query('DELETE FROM sign_in_links WHERE expires_at < $1', [now]);
  await db.query('INSERT INTO sign_in_links (token_sha256, workspace_id, expires_at) VALUES ($1, $2, $3)', [
    sha256(token),
    workspaceId,
    expiresAt,
  ]);
  return { token, expiresAt };
}

/**
 * The workspace of an unused, unexpired link, which is used up by this call: the check and the
 * use are one statement, so two redeems of one link cannot both succeed. Null otherwise.
 */
export async function redeemSignInLink(db: Queryable, token: string, now: Date): Promise<string | null> {
  const { rows } = await db.query<{ workspace_id: string }>(
    `UPDATE sign_in_links SET used_at = $2
     WHERE token_sha256 = $1 AND used_at IS NULL AND expires_at > $2 RETURNING workspace_id`,
    [sha256(token), now],
  );
  return rows[0]?.workspace_id ?? null;
}
