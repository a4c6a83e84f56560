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
  /** By workspace, then user: no key string made at each decision's look-up. */
  private readonly entries = new Map<string, Map<string, Entry>>();
  private size = 0;

  /** The state remembered at `version`; undefined when there is none, or none that current. */
  get(workspaceId: string, userId: string, version: string | null): GuardState | undefined {
    if (version === null) return undefined;
    const entry = this.entries.get(workspaceId)?.get(userId);
    if (!entry || entry.version !== version || performance.now() - entry.storedAt > MAX_AGE_MS) return undefined;
    return entry.state;
  }

  /**
   * `version` must have been read before `state` was: then a change in between shows as a new
   * version. Full, it forgets everything (an entry serves for MAX_AGE_MS at most anyway).
   */
  set(workspaceId: string, userId: string, version: string | null, state: GuardState): void {
    if (version === null) return;
    let users = this.entries.get(workspaceId);
    if (!users?.has(userId) && this.size >= CAPACITY) {
      this.entries.clear();
      this.size = 0;
      users = undefined;
    }
    if (!users) this.entries.set(workspaceId, (users = new Map<string, Entry>()));
    if (!users.has(userId)) this.size++;
    users.set(userId, { version, storedAt: performance.now(), state });
  }
}
