/**
 * Answers kept under an Idempotency-Key: replayed to a request that repeats one, saved in the
 * transaction of the change they answer, and looked up again when a twin of the request won.
 */
import { ApiError } from '../errors.js';
import type { Queryable } from '../store/db.js';
import { findAnswer, saveAnswer, type IdempotencyClaim } from '../store/idempotency.js';
import type { GuardContext } from './guard-context.js';

/** A concurrent twin of an idempotent request committed first. */
export class IdempotencyRace extends Error {}

/**
 * Runs a state change whose answer is remembered in its own transaction. When it conflicts
 * (409) and the request carries a key, a twin of it may have done the work first, or the first
 * attempt committed before its answer was lost: answer as that one did.
 */
export async function replayOnConflict<T>(
  context: GuardContext,
  claim: IdempotencyClaim | undefined,
  change: () => Promise<T>,
): Promise<T> {
  if (!claim) return change();
  try {
    return await change();
  } catch (error) {
    const conflict = error instanceof IdempotencyRace || (error instanceof ApiError && error.statusCode === 409);
    const twin = conflict ? await storedAnswer<T>(context, claim) : null;
    if (twin) return twin;
    throw error;
  }
}

export async function storedAnswer<T>(context: GuardContext, claim: IdempotencyClaim | undefined): Promise<T | null> {
  if (!claim) return null;
  const stored = await findAnswer(context.db, claim.workspaceId, claim.key, context.clock.now());
  if (!stored) return null;
  if (stored.fingerprint !== claim.fingerprint) throw new ApiError('IDEMPOTENCY_KEY_REUSED');
  return stored.body as T;
}

export async function remember(tx: Queryable, claim: IdempotencyClaim | undefined, answer: unknown, now: Date) {
  if (claim && !(await saveAnswer(tx, claim, answer, now))) throw new IdempotencyRace();
}
