/**
 * The dashboard's way in for a workspace without an account (the one the first start creates):
 * an API key mints a one-time link; the link signs in as the workspace's first account, made
 * unnamed when there is none; its owner then names an email and password. Also sign-out, which
 * ends every session of the account (tokens carry the account's token version).
 */
import { cliCommand } from '../cli-command.js';
import { ApiError } from '../errors.js';
import {
  bumpTokenVersion,
  findAccount,
  firstAccountOf,
  insertUnnamedAccount,
  nameAccount,
  type AccountRow,
} from '../store/accounts.js';
import { isUniqueViolation, type Db } from '../store/db.js';
import { createSignInLink, redeemSignInLink } from '../store/sign-in-links.js';
import { lockWorkspaceRow } from '../store/workspaces.js';
import { normalizeEmail } from './accounts.js';
import { hashPassword } from './passwords.js';
import { refuseWeakPassword } from './password-policy.js';
import type { TokenIssuer } from './tokens.js';

/** A link is good for ten minutes, once. */
export const SIGN_IN_LINK_TTL_MS = 10 * 60_000;

export class DashboardSignIn {
  constructor(
    private readonly db: Db,
    private readonly tokens: TokenIssuer,
    private readonly scryptCost: number,
  ) {}

  private async tokenFor(account: AccountRow) {
    const accessToken = await this.tokens.sign({
      accountId: account.id,
      workspaceId: account.workspace_id,
      tokenVersion: account.token_version,
    });
    return { access_token: accessToken, token_type: 'bearer' as const, expires_in: this.tokens.ttlSeconds };
  }

  async mintLink(workspaceId: string, now: Date) {
    const link = await createSignInLink(this.db, workspaceId, now, SIGN_IN_LINK_TTL_MS);
    // In the fragment: a browser never sends it to a server, so it is in no access log or Referer.
    return { path: `/sign-in#token=${link.token}`, token: link.token, expires_at: link.expiresAt.toISOString() };
  }

  async redeemLink(token: string, now: Date) {
    const account = await this.db.transaction(async (tx) => {
      const workspaceId = await redeemSignInLink(tx, token, now);
      if (!workspaceId) return null;
      // Two links redeemed at once for a workspace without an account make one account, not two.
      await lockWorkspaceRow(tx, workspaceId);
      return (await firstAccountOf(tx, workspaceId)) ?? (await insertUnnamedAccount(tx, workspaceId));
    });
    if (!account)
      throw new ApiError(
        'UNAUTHORIZED',
        `This sign-in link is unknown, used or expired: run \`${cliCommand('dashboard')}\` for a new one.`,
      );
    return { ...(await this.tokenFor(account)), owner_set: account.password_hash !== null };
  }

  /** Names the owner of an unnamed account; the answer is a new token (the old one stops working). */
  async setOwner(accountId: string, email: string, password: string) {
    await refuseWeakPassword(password, 'body.password');
    const hash = await hashPassword(password, this.scryptCost);
    let named: AccountRow | null;
    try {
      named = await nameAccount(this.db, accountId, normalizeEmail(email), hash);
    } catch (error) {
      if (isUniqueViolation(error)) throw new ApiError('CONFLICT', 'An account with this email already exists.');
      throw error;
    }
    if (!named) {
      if (!(await findAccount(this.db, accountId))) throw new ApiError('UNAUTHORIZED');
      throw new ApiError(
        'CONFLICT',
        'This account already has an owner email and password: change the password instead.',
      );
    }
    return this.tokenFor(named);
  }

  async signOut(accountId: string): Promise<void> {
    await bumpTokenVersion(this.db, accountId);
  }
}
