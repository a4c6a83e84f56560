/**
 * A workspace's API keys as the API shows them: listed without secrets, regenerated (the new
 * secret shown once, every earlier key revoked), revoked one by one. A key this daemon revokes
 * stops working here at once: the verifier forgets what it remembered.
 */
import type { ApiKey, ApiKeyCreateBody, CreatedApiKey, IssuedApiKey } from '../contract/index.js';
import type { Clock } from '../clock.js';
import type { LocalKeyFile } from '../daemon/local-key.js';
import type { CounterStore } from '../store/counters/counters.js';
import type { Db } from '../store/db.js';
import { createApiKey, listApiKeys, regenerateApiKey } from '../store/workspaces.js';
import type { ApiKeyVerifier } from './api-key-verifier.js';
import { revokeKey } from './deletion.js';

/** Where the fate of the local key file is told: the request's log. */
export interface KeyFileLog {
  info(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

const iso = (date: Date | null) => (date ? new Date(date).toISOString() : null);

export class ApiKeys {
  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly verifier: ApiKeyVerifier,
    /** A local daemon's key file, kept up to date when its key is regenerated. */
    private readonly localKey?: LocalKeyFile,
    /** Told when a revocation deleted the key's budgets: every daemon's next decision reads it. */
    private readonly counters?: Pick<CounterStore, 'stateChanged'>,
  ) {}

  /** Newest first; never a secret or a hash. */
  async list(workspaceId: string): Promise<ApiKey[]> {
    return (await listApiKeys(this.db, workspaceId)).map((key) => ({
      id: key.id,
      prefix: key.prefix,
      name: key.name,
      role: key.role,
      created_at: iso(key.created_at)!,
      last_used_at: iso(key.last_used_at),
      revoked_at: iso(key.revoked_at),
    }));
  }

  /** A new key beside the others, with its role; the answer is the only place the secret is. */
  async create(workspaceId: string, body: ApiKeyCreateBody): Promise<CreatedApiKey> {
    const role = body.role ?? 'admin';
    const key = await createApiKey(this.db, workspaceId, body.name, role);
    return { id: key.id, prefix: key.prefix, api_key: key.apiKey, name: body.name, role };
  }

  /** Issues a new key and revokes every earlier one; the answer is the only place the secret is. */
  async regenerate(workspaceId: string, log: KeyFileLog): Promise<IssuedApiKey> {
    const key = await this.db.transaction((tx) => regenerateApiKey(tx, workspaceId, this.clock.now()));
    this.verifier.forget();
    await this.counters?.stateChanged(workspaceId);
    // The keys are regenerated, and this answer is the only place the new one is shown: a key file
    // that cannot be written is logged, never a reason to lose it.
    const { localKey } = this;
    await localKey?.regenerated(key.revokedPrefixes, key.apiKey).then(
      (saved) => saved && log.info({ file: localKey.path }, 'the local key file holds the regenerated key'),
      (error: unknown) =>
        log.error({ err: error, file: localKey.path }, 'the local key file could not take the regenerated key'),
    );
    return { id: key.id, prefix: key.prefix, api_key: key.apiKey };
  }

  /** Revokes one key (never the workspace's last active one), and deletes its budgets; one already revoked stays so. */
  async revoke(workspaceId: string, keyId: string): Promise<void> {
    await revokeKey(this.db, workspaceId, keyId, this.clock.now());
    this.verifier.forget(); // the verifier's cache must not go on accepting the revoked key
    await this.counters?.stateChanged(workspaceId);
  }
}
