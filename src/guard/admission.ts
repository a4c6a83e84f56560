/**
 * The one executor of an admission plan (admission-plan.ts), for run starts and steps alike: the
 * reads its locks call for, the pure rules, and the write. A batched admission answers once
 * decided, its record still committing; the others once their transaction has committed.
 */
import { ApiError } from '../errors.js';
import type { GuardSnapshot } from '../rules/engine.js';
import {
  lockAdmissions,
  runCounts,
  type CounterScope,
  type DailySpend,
  type RunCounts,
} from '../store/counters/counters.js';
import type { StepSlot } from '../store/counters/step-rate.js';
import type { Queryable } from '../store/db.js';
import { NO_RESERVATIONS, outstandingReservations, type Reserved } from '../store/reservations.js';
import { lockRunUsage, type RunUsage } from '../store/run-usage.js';
import type { AdmissionLocks, AdmissionPlan } from './admission-plan.js';
import type { Decided } from './decided.js';
import { budgetCounts, inReservationQueue, PENDING_READ_ATTEMPTS } from './decision-inputs.js';
import type { GuardContext } from './guard-context.js';
import { NOT_COUNTED } from './guard-snapshot.js';
import { userRateInput } from './run-limits.js';

/** What a decision is made on: read unlocked, or under the plan's locks. */
export interface AdmissionReads {
  counted: DailySpend;
  reserved: Reserved;
  /** Rules 5 and 6's counts, under the admission lock; NOT_COUNTED without it. */
  runCounts: RunCounts;
  /** The run's usage under its lock; null without it. */
  usage: RunUsage | null;
}

/** What is admitted, as the executor needs it: its reads' scope, its rules, its write. */
export interface AdmissionTask<D> {
  workspaceId: string;
  /** The run a step is of (its lock); null for a run start. */
  runId: string | null;
  scope: CounterScope;
  /** The day's spend read before, with this daemon's pending spend. */
  spend: DailySpend;
  now: Date;
  /** The id of the step that takes a place in the user's window. */
  stepId: string;
  /** The rules on what was read (with rule 11's input once a place is taken). */
  decide(reads: AdmissionReads, userRate?: GuardSnapshot['userRate']): D;
  /** Whether `decided` is a step the rules before rule 11 allow (it then takes a place). */
  takesSlot(decided: D): boolean;
  /** Writes the decided records in `tx` (and what they count), with the answer to remember. */
  write(tx: Queryable, decided: D, reads: AdmissionReads, remember: boolean): Promise<void>;
  /** Submits the decided records to their group commit; resolves once durable, with them as written. */
  submit(decided: D): Promise<D>;
}

/**
 * Admits as planned. A batched admission with nothing to read decides at once, without a
 * promise of its own (most proxied calls' steps come this way).
 */
export function admit<D>(
  context: GuardContext,
  plan: AdmissionPlan,
  task: AdmissionTask<D>,
): Decided<D> | Promise<Decided<D>> {
  if (plan.kind !== 'batched') return admitInTransaction(context, plan, task);
  if (plan.readsReservations)
    return outstandingReservations(context.db, task.scope.workspaceId, task.scope.userId, task.scope.subjects).then(
      (reserved) => decideBatched(task, reserved),
    );
  return decideBatched(task, NO_RESERVATIONS);
}

function decideBatched<D>(task: AdmissionTask<D>, reserved: Reserved): Decided<D> {
  const decided = task.decide({ counted: task.spend, reserved, runCounts: NOT_COUNTED, usage: null });
  return { decided, recorded: task.submit(decided) };
}

async function admitInTransaction<D>(
  context: GuardContext,
  plan: Exclude<AdmissionPlan, { kind: 'batched' }>,
  task: AdmissionTask<D>,
): Promise<Decided<D>> {
  const rateSlot = plan.kind === 'guarded' ? plan.rateSlot : null;
  const slot: { taken: StepSlot | null } = { taken: null };
  const decideAndWrite = (tx: Queryable) =>
    lockedDecision(context, tx, plan, rateSlot, task, slot).then(async ([decided, reads]) => {
      await task.write(tx, decided, reads, plan.remember);
      return decided;
    });
  try {
    const decided = await inReservationQueue(context, plan.locks.reservation, task.workspaceId, () =>
      context.db.transaction(async (tx) => {
        // A transaction run again (a deadlock victim) takes its place again.
        await slot.taken?.release();
        slot.taken = null;
        return decideAndWrite(tx);
      }),
    );
    return { decided, recorded: Promise.resolve(decided) };
  } catch (error) {
    // A place taken by a step that was not written is given back.
    await slot.taken?.release();
    throw error;
  }
}

/** The plan's locked reads, the rules, and where a rate applies, a place in the user's window. */
async function lockedDecision<D>(
  context: GuardContext,
  tx: Queryable,
  plan: AdmissionPlan & { locks: AdmissionLocks },
  rateSlot: { limit: number } | null,
  task: AdmissionTask<D>,
  slot: { taken: StepSlot | null },
): Promise<[D, AdmissionReads]> {
  const { locks } = plan;
  let counts = NOT_COUNTED;
  if (locks.admission) {
    await lockAdmissions(tx, task.workspaceId);
    counts = await runCountsLessReleased(context, tx, task.scope);
  }
  let usage: RunUsage | null = null;
  if (locks.run && task.runId !== null) {
    usage = await lockRunUsage(tx, task.workspaceId, task.runId, { reservations: locks.run.withReservations });
    if (!usage) throw new ApiError('RUN_NOT_FOUND');
    if (usage.status !== 'RUNNING') throw new ApiError('RUN_NOT_RUNNING');
  }
  const { counted, reserved } = await budgetCounts(
    tx,
    task.scope,
    task.spend,
    locks.reservation,
    plan.readsReservations,
  );
  const reads: AdmissionReads = { counted, reserved, runCounts: counts, usage };
  const decided = task.decide(reads);
  if (rateSlot === null || !task.takesSlot(decided)) return [decided, reads];
  const nowMs = task.now.getTime();
  slot.taken = await context.counters.takeStepSlot(tx, task.scope, {
    limit: rateSlot.limit,
    nowMs,
    stepId: task.stepId,
  });
  return [task.decide(reads, userRateInput(slot.taken, rateSlot.limit, nowMs)), reads];
}

/**
 * Allowed runs this month, and RUNNING runs less those whose call this daemon has answered (their
 * end is on its way). A released run ended during the count may be in it or not: count again.
 */
async function runCountsLessReleased(context: GuardContext, db: Queryable, scope: CounterScope): Promise<RunCounts> {
  for (let attempt = 1; ; attempt++) {
    const released = context.releasedRuns.held(scope.workspaceId);
    const counts = await runCounts(db, scope);
    if (released.count === 0) return counts;
    if (released.overtaken() && attempt < PENDING_READ_ATTEMPTS) continue;
    // Counted anyway after a few tries: an overtaken run then counts as running (toward denying).
    const freed = released.overtaken() ? 0 : released.count;
    return { ...counts, concurrentRuns: Math.max(0, counts.concurrentRuns - freed) };
  }
}
