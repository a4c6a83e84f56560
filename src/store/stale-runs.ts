/**
 * The stale-run sweep's statements (the sweeper is `jobs/stale-run-sweeper.ts`): a RUNNING run is
 * stale when it started before the cutoff and has no step created since.
 */
import type { Queryable } from './db.js';

export interface EndedStaleRun {
  id: string;
  workspace_id: string;
  user_id: string;
}

const NO_STEP_SINCE = 'NOT EXISTS (SELECT 1 FROM steps s WHERE s.run_id = r.id AND s.created_at >= $1)';

/** Locks a batch of runs that look stale. */
const LOCK_CANDIDATES = `
SELECT r.id FROM runs r WHERE r.status = 'RUNNING' AND r.started_at < $1 AND ${NO_STEP_SINCE}
ORDER BY r.started_at LIMIT $2 FOR UPDATE SKIP LOCKED`;

/**
 * Ends the locked candidates that are stale still. A statement's snapshot predates its row locks:
 * a step that committed in between (releasing the run) was not seen by the first; this one,
 * begun after the locks, sees it, and no step can commit into these runs until the end commits.
 */
const END_STALE = `
UPDATE runs r SET status = 'FAILED', ended_at = $3
WHERE r.id = ANY($2::uuid[]) AND r.status = 'RUNNING' AND ${NO_STEP_SINCE}
RETURNING r.id, r.workspace_id, r.user_id`;

/** Locks (until `tx` ends) up to `limit` runs that look stale at `cutoff`, oldest first; their ids. */
export async function lockStaleCandidates(tx: Queryable, cutoff: Date, limit: number): Promise<string[]> {
  const { rows } = await tx.query<{ id: string }>(LOCK_CANDIDATES, [cutoff, limit]);
  return rows.map((run) => run.id);
}

/** Ends as FAILED, at `now`, those of the locked runs `ids` still stale at `cutoff`; the runs ended. */
export async function endStaleRuns(tx: Queryable, cutoff: Date, ids: string[], now: Date): Promise<EndedStaleRun[]> {
  const { rows } = await tx.query<EndedStaleRun>(END_STALE, [cutoff, ids, now]);
  return rows;
}
