/**
 * API key rows, remembered for at most one second: the key lookup was one Postgres round trip
 * on every authenticated request. A revoked or regenerated key therefore stops working within a
 * second in every daemon, and at once in the daemon that regenerated it (it forgets the
 * workspace's keys). Only found keys are remembered: a key created a moment ago is never refused
 * because of an earlier miss. The expiry runs on the monotonic clock, not the service clock, so
 * a test's frozen clock cannot make an entry live forever.
 *
 * Only credentials are cached here: the kill switch, user blocking and budgets are read fresh
 * for every decision.
 */
import type { ApiKeyRow } from './workspaces.js';

export const API_KEY_CACHE_TTL_MS = 1_000;

interface Entry {
  row: ApiKeyRow;
  expiresAt: number;
}

export class ApiKeyCache {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly ttlMs = API_KEY_CACHE_TTL_MS,
    private readonly maxEntries = 10_000,
    private readonly monotonicNow: () => number = () => performance.now(),
  ) {}

  get(prefix: string): ApiKeyRow | null {
    const entry = this.entries.get(prefix);
    if (!entry) return null;
    if (entry.expiresAt <= this.monotonicNow()) {
      this.entries.delete(prefix);
      return null;
    }
    return entry.row;
  }

  set(prefix: string, row: ApiKeyRow): void {
    // Bounded: past the limit, the oldest entry goes (a Map iterates in insertion order).
    if (this.entries.size >= this.maxEntries && !this.entries.has(prefix)) {
      this.entries.delete(this.entries.keys().next().value!);
    }
    this.entries.set(prefix, { row, expiresAt: this.monotonicNow() + this.ttlMs });
  }

  /** After a workspace's keys changed in this daemon. */
  forgetWorkspace(workspaceId: string): void {
    for (const [prefix, entry] of this.entries) {
      if (entry.row.workspace_id === workspaceId) this.entries.delete(prefix);
    }
  }
}
