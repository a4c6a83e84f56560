/**
 * A run's end (COMPLETED or FAILED, from the API or after a proxied call of the run's own): the
 * run written ended, its concurrency slot freed, and what this daemon kept for its steps dropped.
 */
import { ApiError } from '../errors.js';
import type { Queryable } from '../store/db.js';
import type { IdempotencyClaim } from '../store/idempotency.js';
import * as runs from '../store/runs.js';
import type { GuardContext } from './guard-context.js';
import type { RunEnded } from '../contract/runs.js';
import { remember, replayOnConflict, storedAnswer } from './idempotent-answers.js';
import { assertRunOfCaller } from './run-owner.js';

export async function endRun(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  status: 'COMPLETED' | 'FAILED',
  idempotency?: IdempotencyClaim,
  agentKeyId: string | null = null,
): Promise<RunEnded> {
  const replay = idempotency ? await storedAnswer<RunEnded>(context, idempotency) : null;
  if (replay) return replay;
  await assertRunOfCaller(context, workspaceId, runId, agentKeyId);
  const now = context.clock.now();
  const end = async (db: Queryable): Promise<RunEnded> => {
    const request = { workspaceId, runId, status, now };
    const ended = await (
      idempotency ? runs.endRuns(db, [request]).then((all) => all[0]) : context.runEnds.submit(request)
    ).finally(() => context.releasedRuns.ended(workspaceId, runId));
    if (!ended) {
      if (await runs.runExists(db, workspaceId, runId)) throw new ApiError('RUN_NOT_RUNNING');
      throw new ApiError('RUN_NOT_FOUND');
    }
    const answer: RunEnded = { id: ended.id, status: ended.status, ended_at: ended.ended_at.toISOString() };
    await remember(db, idempotency, answer, now);
    // An ended run takes no more steps: what was kept for them goes (a step that still comes
    // reads the run, and is told it no longer runs).
    context.sequences.ended(runId);
    context.runFacts.forget(`${workspaceId}/${runId}`);
    return answer;
  };
  // One statement commits on its own, in a batch with the ends under way; a remembered answer
  // must commit with it, in a transaction of its own.
  return replayOnConflict(context, idempotency, () => (idempotency ? context.db.transaction(end) : end(context.db)));
}
