/**
 * Runs started for a single proxied call whose answer has been released and whose end is not written yet.
 * Their client is done with them, so they hold no concurrency slot: a run start in this daemon
 * counts the workspace's RUNNING runs and takes these off. Other daemons see the slot free once
 * the end commits (a few milliseconds later).
 *
 * Exactness: a run is in the set from its release until its end was written (or given up), and
 * was RUNNING and committed before it entered; so a count that began while it was in the set
 * counted it, unless its end committed during the count. That case shows as `overtaken`, and the
 * count is taken again.
 */
interface Entry {
  ended: boolean;
}

export class ReleasedRuns {
  /** By workspace, by run id. */
  private readonly byWorkspace = new Map<string, Map<string, Entry>>();

  /** The call's answer is out: its run stops holding a slot in this daemon's admissions. */
  release(workspaceId: string, runId: string): void {
    let runs = this.byWorkspace.get(workspaceId);
    if (!runs) this.byWorkspace.set(workspaceId, (runs = new Map<string, Entry>()));
    runs.set(runId.toLowerCase(), { ended: false });
  }

  /** The run's end was written (or will not be): the records speak for it again. */
  ended(workspaceId: string, runId: string): void {
    const runs = this.byWorkspace.get(workspaceId);
    const entry = runs?.get(runId.toLowerCase());
    if (!runs || !entry) return;
    entry.ended = true;
    runs.delete(runId.toLowerCase());
    if (runs.size === 0) this.byWorkspace.delete(workspaceId);
  }

  /** The released runs of a workspace now; take it before counting RUNNING runs. */
  held(workspaceId: string): { count: number; overtaken(): boolean } {
    const entries = [...(this.byWorkspace.get(workspaceId)?.values() ?? [])];
    return { count: entries.length, overtaken: () => entries.some((entry) => entry.ended) };
  }
}
