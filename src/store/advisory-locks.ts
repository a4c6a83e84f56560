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
