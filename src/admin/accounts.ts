/** Dashboard accounts: register, log in, change password, and resolve a token to its caller. */
import { readShippedCatalog } from '../money/shipped-catalog.js';
import { seedPricing } from '../store/pricing-catalog.js';
import type { Account } from '../contract/index.js';
import type { Principal } from './principal.js';
import { ApiError } from '../errors.js';
import { refuseWeakPassword } from './password-policy.js';
import { changePasswordHash, findAccount, findAccountByEmail, insertAccount } from '../store/accounts.js';
import { isUniqueViolation, type Db } from '../store/db.js';
import { createApiKey, createWorkspace, getWorkspace } from '../store/workspaces.js';
import { decoyHash, hashPassword, verifyPassword } from './passwords.js';
import type { TokenIssuer } from './tokens.js';

export const normalizeEmail = (email: string): string => email.trim().toLowerCase();

export class Accounts {
  /** Verified against when the email is unknown, so both failures take the same time. */
  private readonly decoy: string;

  constructor(
    private readonly db: Db,
    private readonly tokens: TokenIssuer,
    private readonly scryptCost: number,
  ) {
    this.decoy = decoyHash(scryptCost);
  }

  private async tokenFor(account: { id: string; workspace_id: string; token_version: number }) {
    const accessToken = await this.tokens.sign({
      accountId: account.id,
      workspaceId: account.workspace_id,
      tokenVersion: account.token_version,
    });
    return { access_token: accessToken, token_type: 'bearer' as const, expires_in: this.tokens.ttlSeconds };
  }

  async register(input: { email: string; password: string; workspace_name?: string }) {
    const email = normalizeEmail(input.email);
    await refuseWeakPassword(input.password, 'body.password');
    const passwordHash = await hashPassword(input.password, this.scryptCost);
    const catalog = (await readShippedCatalog()).entries;
    try {
      const created = await this.db.transaction(async (tx) => {
        const workspace = await createWorkspace(tx, input.workspace_name ?? `${email}'s workspace`, 'basic');
        // Priced from the first call: without prices every budget would count $0.
        await seedPricing(tx, workspace.id, catalog, new Date());
        const account = await insertAccount(tx, email, passwordHash, workspace.id);
        const key = await createApiKey(tx, workspace.id, 'first key');
        return { workspace, account, key };
      });
      const { workspace, account, key } = created;
      return {
        account: { id: account.id, email, created_at: new Date(account.created_at).toISOString() },
        workspace: { id: workspace.id, name: workspace.name, plan: workspace.plan },
        api_key: key.apiKey,
        ...(await this.tokenFor(account)),
      };
    } catch (error) {
      if (isUniqueViolation(error)) throw new ApiError('CONFLICT', 'An account with this email already exists.');
      throw error;
    }
  }

  async login(input: { email: string; password: string }) {
    const account = await findAccountByEmail(this.db, normalizeEmail(input.email));
    const matches = await verifyPassword(input.password, account?.password_hash ?? this.decoy);
    if (!account || !matches) throw new ApiError('UNAUTHORIZED', 'Invalid email or password.');
    return this.tokenFor(account);
  }

  async me(accountId: string): Promise<Account> {
    const account = await findAccount(this.db, accountId);
    const workspace = account && (await getWorkspace(this.db, account.workspace_id));
    if (!account || !workspace) throw new ApiError('UNAUTHORIZED');
    return {
      id: account.id,
      email: account.email,
      created_at: new Date(account.created_at).toISOString(),
      workspace: { id: workspace.id, name: workspace.name, plan: workspace.plan },
    };
  }

  async changePassword(accountId: string, currentPassword: string, newPassword: string): Promise<void> {
    const account = await findAccount(this.db, accountId);
    if (!account) throw new ApiError('UNAUTHORIZED');
    if (account.password_hash === null) {
      throw new ApiError('BAD_REQUEST', 'This account has no password yet: set the owner email and password first.');
    }
    if (!(await verifyPassword(currentPassword, account.password_hash))) {
      throw new ApiError('BAD_REQUEST', 'The current password is wrong.');
    }
    await refuseWeakPassword(newPassword, 'body.new_password');
    await changePasswordHash(this.db, account.id, await hashPassword(newPassword, this.scryptCost));
  }

  /** A principal for a valid token of an account whose password has not changed since. */
  async verifyToken(token: string): Promise<Principal | null> {
    const claims = await this.tokens.verify(token);
    if (!claims) return null;
    const account = await findAccount(this.db, claims.accountId);
    if (!account || account.token_version !== claims.tokenVersion || account.workspace_id !== claims.workspaceId)
      return null;
    return { workspaceId: account.workspace_id, kind: 'jwt', subjectId: account.id };
  }
}
