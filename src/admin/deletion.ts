/**
 * Deletion use cases: a pricing entry, an API key (revoked), a user with their ended runs. None
 * can loosen a guard: runs are deleted only when ended and wholly before the counted windows
 * (store/deletion.ts), and the daily usage counters the guards read are never lowered.
 */
import { cliCommand } from '../cli-command.js';
import { ApiError } from '../errors.js';
import type { Db } from '../store/db.js';
import {
  countUserCountedRuns,
  deletePricing,
  deleteUserRecord,
  purgeUserRuns,
  revokeApiKey,
} from '../store/deletion.js';

export async function deletePricingEntry(db: Db, workspaceId: string, model: string): Promise<void> {
  if (!(await deletePricing(db, workspaceId, model))) {
    throw new ApiError('PRICING_NOT_FOUND', `The workspace has no pricing entry for ${JSON.stringify(model)}.`);
  }
}

/** Revokes a key; revoking one already revoked changes nothing and succeeds. */
export async function revokeKey(db: Db, workspaceId: string, keyId: string, now: Date): Promise<void> {
  const outcome = await db.transaction((tx) => revokeApiKey(tx, workspaceId, keyId, now));
  if (outcome === 'not_found') throw new ApiError('API_KEY_NOT_FOUND');
  if (outcome === 'last_active_key') {
    throw new ApiError(
      'LAST_ACTIVE_KEY',
      "This is the workspace's last active API key; revoking it would lock every client out. " +
        `Issue a new key first (POST /v1/api-keys/regenerate, or ${cliCommand('keys regenerate --yes')}), which revokes this one.`,
    );
  }
}

/**
 * Deletes a user's record and runs. Refused (409) while any of their runs is RUNNING or falls in a
 * counted window: deleting those would lower what `reconcile` recounts for today's spend or this
 * month's runs. The check is advisory; the purge's own condition is what keeps a run started
 * meanwhile, so a race can only leave a run behind, never delete a counted one.
 */
export async function deleteUser(
  db: Db,
  workspaceId: string,
  userId: string,
  now: Date,
): Promise<{ user_id: string; runs_deleted: number }> {
  const counted = await countUserCountedRuns(db, workspaceId, userId, now);
  if (counted > 0) {
    throw new ApiError(
      'USER_HAS_COUNTED_RUNS',
      `${userId} has ${counted} run(s) RUNNING or inside a counted window (since the start of yesterday or of this month, UTC, ` +
        'whichever is earlier); they can be deleted once that window has passed. Block the user meanwhile if needed.',
    );
  }
  const runsDeleted = await purgeUserRuns(db, workspaceId, userId, now);
  const recordDeleted = await db.transaction((tx) => deleteUserRecord(tx, workspaceId, userId, now));
  if (!recordDeleted && runsDeleted === 0) throw new ApiError('USER_NOT_FOUND');
  return { user_id: userId, runs_deleted: runsDeleted };
}
