import type { Queryable } from './db.js';

/**
 * Every fixed advisory lock id the daemon takes, in one place: two uses of one id would make them
 * wait on each other (a session lock held through an index build once kept daemons from starting).
 * Per-workspace locks hash their key instead (`counters.ts`).
 */
export const ADVISORY_LOCKS = {
  /** Daemons starting together apply migrations one at a time. */
  migrations: 7_318_842_001,
  /** One daemon creates the default workspace on an empty database. */
  bootstrap: 7_318_842_002,
  /** One reconcile's check and repair at a time. */
  reconcile: 7_318_842_003,
  /** One daemon builds the late indexes (a session lock, held for the whole build). */
  lateIndexes: 7_318_842_004,
} as const;

export type AdvisoryLock = keyof typeof ADVISORY_LOCKS;

/** Waits for the lock, held until the transaction `tx` ends. */
export async function lockForTransaction(tx: Queryable, lock: AdvisoryLock): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock($1)', [ADVISORY_LOCKS[lock]]);
}

/** Takes the lock until the transaction `tx` ends if it is free; false (without waiting) when it is held. */
export async function tryLockForTransaction(tx: Queryable, lock: AdvisoryLock): Promise<boolean> {
  const { rows } = await tx.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS locked', [
    ADVISORY_LOCKS[lock],
  ]);
  return rows[0]!.locked;
}
