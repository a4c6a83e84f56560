/**
 * Verifies API keys against their records: what the auth hook and the proxy ask of a bearer key.
 * Key records are remembered for at most `cacheMs` (1 s by default): a key revoked through another
 * daemon stops working there within that second, and at once in the daemon that revoked it
 * (`forget`). The secret is checked on every call, in constant time.
 */
import { timingSafeEqual } from 'node:crypto';
import type { Db } from '../store/db.js';
import { API_KEY_PATTERN, findApiKey, sha256, touchApiKey, type ApiKeyRow } from '../store/workspaces.js';
import type { Principal } from './principal.js';

/** `last_used_at` is bookkeeping: one write a minute per key is plenty. */
const TOUCH_INTERVAL_MS = 60_000;

export class ApiKeyVerifier {
  private readonly cache = new Map<string, { row: ApiKeyRow | null; until: number }>();

  constructor(
    private readonly db: Db,
    private readonly cacheMs = 1_000,
  ) {}

  async verify(apiKey: string, now: Date): Promise<Principal | null> {
    const match = API_KEY_PATTERN.exec(apiKey);
    if (!match) return null;
    const prefix = match[1]!;
    let entry = this.cache.get(prefix);
    if (!entry || entry.until <= now.getTime()) {
      entry = { row: await findApiKey(this.db, prefix), until: now.getTime() + this.cacheMs };
      if (this.cacheMs > 0) this.remember(prefix, entry);
    }
    const row = entry.row;
    // Hash even when the prefix is unknown, so timing does not tell which prefixes exist.
    const presented = sha256(match[2]!);
    if (!row || row.revoked_at || !timingSafeEqual(presented, row.secret_sha256)) return null;
    if (!row.last_used_at || now.getTime() - row.last_used_at.getTime() > TOUCH_INTERVAL_MS) {
      row.last_used_at = now;
      await touchApiKey(this.db, row.id, now);
    }
    return { workspaceId: row.workspace_id, kind: 'key', subjectId: row.id, role: row.role };
  }

  /** Drops every remembered key (after this daemon revoked some). */
  forget(): void {
    this.cache.clear();
  }

  private remember(prefix: string, entry: { row: ApiKeyRow | null; until: number }) {
    // Bounded: unknown prefixes are remembered too, so a flood of made-up keys cannot grow it forever.
    if (this.cache.size >= 10_000) this.cache.clear();
    this.cache.set(prefix, entry);
  }
}
