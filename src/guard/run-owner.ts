/**
 * Whose run it is: an agent key acts only on the runs it started (as it reads only those), so a
 * write of its into any other run is not found.
 */
import { ApiError } from '../errors.js';
import { runStartedBy } from '../store/run-list.js';
import type { GuardContext } from './guard-context.js';

/**
 * Whether the API key started the run: from what this daemon keeps of a running run it has seen
 * (no round trip), else from the run's record.
 */
export async function startedByKey(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  apiKeyId: string,
): Promise<boolean> {
  const known = context.runFacts.get(`${workspaceId}/${runId}`);
  if (known !== undefined) return known.apiKeyId === apiKeyId;
  return runStartedBy(context.db, workspaceId, runId, apiKeyId);
}

/** Throws RUN_NOT_FOUND unless the caller may act on the run (`agentKeyId` null: any run of the workspace). */
export async function assertRunOfCaller(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  agentKeyId: string | null,
): Promise<void> {
  if (agentKeyId !== null && !(await startedByKey(context, workspaceId, runId, agentKeyId)))
    throw new ApiError('RUN_NOT_FOUND');
}
