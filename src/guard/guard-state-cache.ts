/**
 * What the rules read from a workspace's records (settings, kill switch, a user's block and
 * budget), remembered per workspace and user with the workspace's state version at the time it
 * was read. It is used only while that version is still current, so a change made through any
 * daemon (which bumps the version after it commits) is seen by the very next decision anywhere.
 * The age limit bounds what a lost version bump (Redis failing at that moment) could leave stale.
 */
import type { GuardState } from '../store/workspaces.js';

const MAX_AGE_MS = 2_000;
const CAPACITY = 10_000;

interface Entry {
  version: string;
  storedAt: number;
  state: GuardState;
}

export class GuardStateCache {
  private readonly entries = new Map<string, Entry>();

  /** The state remembered at `version`; undefined when there is none, or none that current. */
  get(workspaceId: string, userId: string, version: string | null): GuardState | undefined {
    if (version === null) return undefined;
    const entry = this.entries.get(key(workspaceId, userId));
    if (!entry || entry.version !== version || performance.now() - entry.storedAt > MAX_AGE_MS) return undefined;
    return entry.state;
  }

  /** `version` must have been read before `state` was: then a change in between shows as a new version. */
  set(workspaceId: string, userId: string, version: string | null, state: GuardState): void {
    if (version === null) return;
    const cacheKey = key(workspaceId, userId);
    this.entries.delete(cacheKey);
    if (this.entries.size >= CAPACITY) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(cacheKey, { version, storedAt: performance.now(), state });
  }
}

const key = (workspaceId: string, userId: string) => `${workspaceId}\u0000${userId}`;
