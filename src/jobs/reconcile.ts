/**
 * Reconciliation: recounts what the daily usage counters should be from the run and step records,
 * reports every difference, and repairs it. (A run's own totals are not checked: recounting one
 * reads all its steps, however old, and a long run's would be read on every pass.) On demand
 * (`runCounts`), also the run list's counts by workspace and status, which reads every run. The
 * counters are written in the same transactions as the records, so a difference means a bug, a
 * hand edit or triggers switched off (`session_replication_role = replica`, a restore with
 * `--disable-triggers`); the Redis copy of spend can lag behind (a write lost in a crash) and is raised to the records.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { lockForTransaction, tryLockForTransaction } from '../store/advisory-locks.js';
import {
  recordedSpend,
  scopeAt,
  workspaceScopeAt,
  type CounterStore,
  type DailySpend,
  type WorkspaceScope,
} from '../store/counters/counters.js';
import type { Db } from '../store/db.js';
import { readOneSnapshot, tallyDrift } from '../store/reconcile-tally.js';
import { periodic } from './periodic.js';
import {
  addCountDifferences,
  addDifferences,
  readTodaysSpend,
  readTodaysSubjectSpend,
  runCountDrift,
  subjectUsageDrift,
  usageDrift,
  userUsageDrift,
} from '../store/reconcile.js';

export interface Drift {
  kind: 'workspace_usage' | 'user_usage' | 'subject_usage' | 'spend_copy' | 'run_count';
  key: string;
  expected: string;
  found: string;
}

export interface ReconcileReport {
  checkedFrom: string;
  drifts: Drift[];
  repaired: boolean;
  /** Another reconcile held the lock, and this one was told not to wait: nothing was checked. */
  skipped?: boolean;
}

export async function reconcile(
  db: Db,
  counters: CounterStore,
  options: { now: Date; days: number; repair: boolean; runCounts?: boolean; waitForLock?: boolean },
): Promise<ReconcileReport> {
  const from = new Date(options.now.getTime() - (options.days - 1) * 86_400_000).toISOString().slice(0, 10);
  const drifts: Drift[] = [];
  const runCounts = options.runCounts ?? false;
  const checked = options.repair
    ? await checkAndRepair(db, from, runCounts, options.waitForLock ?? true)
    : await Promise.all([
        usageDrift(db, from),
        userUsageDrift(db, from),
        subjectUsageDrift(db, from),
        runCounts ? runCountDrift(db) : [],
      ]).then(([usage, userUsage, subjectUsage, counts]) => ({ usage, userUsage, subjectUsage, counts }));
  if (!checked) return { checkedFrom: from, drifts, repaired: false, skipped: true };
  const { usage, userUsage, subjectUsage, counts } = checked;
  // A repaired day may be one that daemons remember as past (a budget's week or month): the
  // version bump makes them read it again at their next decision.
  if (options.repair)
    for (const workspaceId of new Set([...usage, ...userUsage, ...subjectUsage].map((row) => row.workspace_id!)))
      await counters.stateChanged(workspaceId);
  for (const row of usage) {
    drifts.push({
      kind: 'workspace_usage',
      key: `${row.workspace_id}/${row.day}`,
      expected: `spend=${row.expected_spend} runs=${row.expected_runs}`,
      found: `spend=${row.found_spend} runs=${row.found_runs}`,
    });
  }
  for (const row of userUsage) {
    drifts.push({
      kind: 'user_usage',
      key: `${row.workspace_id}/${row.user_id}/${row.day}`,
      expected: `spend=${row.expected_spend} runs=${row.expected_runs}`,
      found: `spend=${row.found_spend} runs=${row.found_runs}`,
    });
  }
  for (const row of subjectUsage) {
    drifts.push({
      kind: 'subject_usage',
      key: `${row.workspace_id}/${row.subject}/${row.day}`,
      expected: `spend=${row.expected_spend}`,
      found: `spend=${row.found_spend}`,
    });
  }
  for (const row of counts) {
    drifts.push({
      kind: 'run_count',
      key: `${row.workspace_id}/${row.status}`,
      expected: `runs=${row.expected_runs}`,
      found: `runs=${row.found_runs}`,
    });
  }
  drifts.push(...(await checkSpendCopies(db, counters, options.now, options.repair)));
  return { checkedFrom: from, drifts, repaired: options.repair };
}

/** The Redis copy of today's spend, for every workspace, user and subject who spent today. */
async function checkSpendCopies(db: Db, counters: CounterStore, now: Date, repair: boolean): Promise<Drift[]> {
  if (counters.kind !== 'redis') return [];
  return [
    ...(await refreshSpendCopy(db, counters, now, repair)),
    ...(await refreshSubjectCopies(db, counters, now, repair)),
  ];
}

/**
 * The periodic pass: `reconcile`'s check and repair, its recount read in slices
 * (`store/reconcile-tally.ts`) under the reconcile lock, with `between` awaited between them, so
 * a day of millions of steps does not hold Postgres's cores for seconds at once. No counter row
 * is locked for the check; only a drift found (a bug, a hand edit) runs `reconcile` itself, whose
 * one-statement checks repair it. The Redis copies are checked as `reconcile` checks them.
 */
export async function reconcileInSlices(
  db: Db,
  counters: CounterStore,
  options: { now: Date; days: number; between?: (sliceMs: number) => Promise<void>; perSlice?: number },
): Promise<ReconcileReport & { slices?: number; records?: number }> {
  const from = new Date(options.now.getTime() - (options.days - 1) * 86_400_000).toISOString().slice(0, 10);
  const tally = await db.transaction(async (tx) => {
    await readOneSnapshot(tx);
    // Another daemon's pass (or the CLI's reconcile) is doing the same work: not waiting for it.
    if (!(await tryLockForTransaction(tx, 'reconcile'))) return null;
    return tallyDrift(tx, options.now, { from, between: options.between, perSlice: options.perSlice });
  });
  if (!tally) return { checkedFrom: from, drifts: [], repaired: false, skipped: true };
  if (tally.usage.length + tally.userUsage.length + tally.subjectUsage.length > 0)
    return reconcile(db, counters, { now: options.now, days: options.days, repair: true, waitForLock: false });
  const drifts = await checkSpendCopies(db, counters, options.now, true);
  return { checkedFrom: from, drifts, repaired: true, slices: tally.slices, records: tally.records };
}

/**
 * Checks and repairs in one transaction, under the reconcile lock. Each drift is repaired by
 * adding its difference (expected minus found, both read by one statement, so from one snapshot)
 * to the counter as it is now: the writes committed since the check are already in it and stay,
 * and no counter row is held while the check reads the records. The lock keeps two reconciles from
 * applying the same difference twice. Rows are upserted in the order every writer locks them:
 * days sorted, then users' days sorted.
 */
async function checkAndRepair(db: Db, from: string, runCounts: boolean, waitForLock: boolean) {
  return db.transaction(async (tx) => {
    if (waitForLock) {
      await lockForTransaction(tx, 'reconcile');
    } else if (!(await tryLockForTransaction(tx, 'reconcile'))) {
      return null;
    }
    const usage = await usageDrift(tx, from);
    const userUsage = await userUsageDrift(tx, from);
    const subjectUsage = await subjectUsageDrift(tx, from);
    const counts = runCounts ? await runCountDrift(tx) : [];
    await addDifferences(tx, 'usage_daily', usage);
    await addDifferences(tx, 'user_usage_daily', userUsage);
    await addDifferences(tx, 'subject_usage_daily', subjectUsage);
    await addCountDifferences(tx, counts);
    return { usage, userUsage, subjectUsage, counts };
  });
}

async function todaysSpend(
  db: Db,
  now: Date,
): Promise<Map<string, DailySpend & { workspaceId: string; userId: string; timeZone: string; day: string }>> {
  const rows = await readTodaysSpend(db, now);
  return new Map(
    rows.map((row) => [
      `${row.workspace_id}/${row.user_id}`,
      {
        workspaceId: row.workspace_id,
        userId: row.user_id,
        timeZone: row.time_zone,
        day: row.day,
        workspaceDailySpendMicros: Number(row.ws_spend),
        userDailySpendMicros: Number(row.user_spend),
      },
    ]),
  );
}

/**
 * The Redis copy of today's spend against the records. The copy is raised after each commit, so
 * under load it is normally ahead of records read a moment before it, and behind records read a
 * moment after: only a copy below the records read before it (a raise lost), or above those read
 * after it (a hand edit, a bug), is a drift. A copy behind is raised, never set: setting it would
 * undo the raises that landed since the records were read, and decisions would read less spend
 * than is recorded. A copy above is set to the records, then raised to them read again.
 */
async function refreshSpendCopy(db: Db, counters: CounterStore, now: Date, repair: boolean): Promise<Drift[]> {
  const before = await todaysSpend(db, now);
  const scopeOf = (recorded: { workspaceId: string; userId: string; timeZone: string }) =>
    scopeAt(now, recorded.workspaceId, recorded.userId, recorded.timeZone);
  const copies = new Map<string, DailySpend>();
  for (const [key, recorded] of before) copies.set(key, await counters.readSpend(scopeOf(recorded)));
  const after = await todaysSpend(db, now);
  const drifts: Drift[] = [];
  for (const [key, recorded] of before) {
    const scope = scopeOf(recorded);
    const copy = copies.get(key)!;
    const later = after.get(key) ?? recorded;
    const behind =
      copy.workspaceDailySpendMicros < recorded.workspaceDailySpendMicros ||
      copy.userDailySpendMicros < recorded.userDailySpendMicros;
    const above =
      copy.workspaceDailySpendMicros > later.workspaceDailySpendMicros ||
      copy.userDailySpendMicros > later.userDailySpendMicros;
    if (!behind && !above) continue;
    drifts.push({
      kind: 'spend_copy',
      key: `${key}/${recorded.day}`,
      expected: `${(above ? later : recorded).workspaceDailySpendMicros}/${(above ? later : recorded).userDailySpendMicros}`,
      found: `${copy.workspaceDailySpendMicros}/${copy.userDailySpendMicros}`,
    });
    if (!repair) continue;
    // Set, then raised to the records read again: a step's raise that landed between the read
    // and the set was undone by it, and is redone (a raise never lowers a copy).
    if (above) await counters.resyncSpend(scope, await recordedSpend(db, scope));
    await counters.spendRecorded(scope, await recordedSpend(db, scope));
  }
  return drifts;
}

/** Today's recorded spend by workspace (with its local day's scope, of no user) and subject. */
async function todaysSubjectSpend(db: Db, now: Date) {
  const byWorkspace = new Map<string, { scope: WorkspaceScope; spend: Map<string, number> }>();
  for (const row of await readTodaysSubjectSpend(db, now)) {
    let found = byWorkspace.get(row.workspace_id);
    if (!found) {
      found = { scope: workspaceScopeAt(now, row.workspace_id, row.time_zone), spend: new Map() };
      byWorkspace.set(row.workspace_id, found);
    }
    found.spend.set(row.subject, Number(row.spend));
  }
  return byWorkspace;
}

/**
 * The Redis copies of today's spend of key and tag budgets' subjects against the records, as
 * `refreshSpendCopy` checks the workspace's and users': a copy behind is raised, one above is set.
 */
async function refreshSubjectCopies(db: Db, counters: CounterStore, now: Date, repair: boolean): Promise<Drift[]> {
  const before = await todaysSubjectSpend(db, now);
  const copies = new Map<string, DailySpend>();
  for (const [workspaceId, { scope, spend }] of before)
    copies.set(workspaceId, await counters.readSpend({ ...scope, subjects: [...spend.keys()] }));
  const after = await todaysSubjectSpend(db, now);
  const drifts: Drift[] = [];
  for (const [workspaceId, { scope, spend }] of before) {
    const subjects = [...spend.keys()];
    const copy = copies.get(workspaceId)!;
    const drifted = subjects.filter((subject) => {
      const found = copy.subjects?.[subject]?.day ?? 0;
      const later = after.get(workspaceId)?.spend.get(subject) ?? spend.get(subject)!;
      if (found >= spend.get(subject)! && found <= later) return false;
      drifts.push({
        kind: 'spend_copy',
        key: `${workspaceId}/${subject}/${scope.day}`,
        expected: `${later}`,
        found: `${found}`,
      });
      return true;
    });
    if (!repair || drifted.length === 0) continue;
    const driftedScope = { ...scope, subjects: drifted };
    await counters.resyncSpend(driftedScope, await recordedSpend(db, driftedScope));
    await counters.spendRecorded(driftedScope, await recordedSpend(db, driftedScope));
  }
  return drifts;
}

/**
 * Raises the Redis copy of today's spend to the records, for every workspace and user who spent
 * today (never lowers it). For crash recovery: a dead daemon's last results may be committed
 * without their raise of the copy, and decisions would read less than is recorded.
 */
export async function raiseSpendCopies(db: Db, counters: CounterStore, now: Date): Promise<number> {
  if (counters.kind !== 'redis') return 0;
  const recorded = await todaysSpend(db, now);
  for (const spend of recorded.values()) {
    await counters.spendRecorded(scopeAt(now, spend.workspaceId, spend.userId, spend.timeZone), spend);
  }
  return recorded.size;
}

export interface PeriodicReconcile {
  start(): void;
  stop(): Promise<void>;
}

/**
 * Checks and repairs today's and yesterday's counters every `intervalMs` (0: never), logging what
 * it found: `reconcileInSlices`, pausing between slices on Postgres. Several daemons may run it: a pass that finds another's check under way (its lock
 * held) skips, rather than wait to do the same work again.
 */
export function periodicReconcile(options: {
  db: Db;
  counters: CounterStore;
  clock: { now(): Date };
  logger: Logger;
  intervalMs: number;
}): PeriodicReconcile {
  // Between slices, a pause as long as the slice (on Postgres: the pass takes at most about half
  // of one core); none once the daemon stops, and none on the embedded database, whose one
  // connection the pass holds until it ends.
  const between = async (sliceMs: number) => {
    if (options.db.kind === 'postgres' && !job.stopped) await sleep(Math.min(sliceMs, 1_000));
  };
  const once = async () => {
    try {
      // Not waiting for another daemon's (or the CLI's) reconcile: it is doing the same work, and
      // a pass waiting on its lock would hold up this daemon's shutdown.
      const report = await reconcileInSlices(options.db, options.counters, {
        now: options.clock.now(),
        days: 2,
        between,
      });
      // Debug only: a fleet skips most passes by design; an operator tracing one may want to see it.
      if (report.skipped) options.logger.debug('reconcile pass skipped: another reconcile holds its lock');
      if (report.drifts.length > 0)
        options.logger.warn(
          { drifts: report.drifts.slice(0, 50), count: report.drifts.length },
          'counters drifted from the records; repaired',
        );
    } catch (error) {
      options.logger.warn({ err: error }, 'reconciliation failed; it will be tried again');
    }
  };
  const job = periodic({ name: 'reconcile pass', everyMs: options.intervalMs, pass: once, logger: options.logger });
  return {
    start() {
      void job.start();
    },
    stop: () => job.stop(),
  };
}
