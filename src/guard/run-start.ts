/**
 * A run's start: the run-start rules decided on the workspace's state, spend and (where it has a
 * run limit) its run counts, then the run written, RUNNING or BLOCKED. A run of a proxied call's
 * own starts with that call's step, decided on the same inputs and written in the same commit.
 */
import type { RunCreated, RunLimitsRequest, StepCreated } from '../contract/runs.js';
import { evaluate, type GuardSnapshot } from '../rules/engine.js';
import { lockAdmissions, runCounts, type CounterScope, type RunCounts } from '../store/counters/counters.js';
import type { Queryable } from '../store/db.js';
import type { IdempotencyClaim } from '../store/idempotency.js';
import * as runs from '../store/runs.js';
import type { StepSlot } from '../store/counters/step-rate.js';
import { timeOrderedId } from '../store/time-ordered-id.js';
import { budgetCounts, decisionInputs, inReservationQueue, PENDING_READ_ATTEMPTS } from './decision-inputs.js';
import type { GuardContext } from './guard-context.js';
import {
  budgetTerms,
  NOT_COUNTED,
  readsReservations,
  reservesAgainstBudget,
  reserveTerms,
  toSnapshot,
  type BudgetedCall,
} from './guard-snapshot.js';
import { createdView, view } from './guard-views.js';
import { IdempotencyRace, remember, storedAnswer } from './idempotent-answers.js';
import {
  FRESH_RUN,
  loopHash,
  resolveRunLimits,
  runLimitsView,
  runReserve,
  runRuleInputs,
  userRateInput,
} from './run-limits.js';
import { modelPricedInput, newStep, stepEstimate, toolPolicyInput, type StepInput } from './step-input.js';
import { rememberStep } from './step-results.js';

/** What a start takes: the run API's body. */
export interface RunStartInput {
  user_id: string;
  metadata?: unknown;
  limits?: RunLimitsRequest;
  /** The API key that starts it (not on the wire: the caller's credential). */
  apiKeyId?: string | null;
}

export async function startRun(
  context: GuardContext,
  workspaceId: string,
  input: RunStartInput,
  idempotency?: IdempotencyClaim,
): Promise<RunCreated> {
  const replay = idempotency ? await storedAnswer<RunCreated>(context, idempotency) : null;
  if (replay) return replay;
  try {
    return (await beginRun(context, workspaceId, input, idempotency, null)).run;
  } catch (error) {
    if (error instanceof IdempotencyRace) return (await storedAnswer<RunCreated>(context, idempotency))!;
    throw error;
  }
}

/**
 * A run's start, alone (the API's) or with a proxied call's first step (`decideRunWithStep`):
 * `whenDecided` is told once both are decided and, in a batch, submitted.
 */
export async function beginRun(
  context: GuardContext,
  workspaceId: string,
  input: RunStartInput,
  idempotency: IdempotencyClaim | undefined,
  firstStep: Omit<StepInput, 'sequence'> | null,
  whenDecided?: (decided: { run: RunCreated; step: StepCreated | null }) => void,
): Promise<{ run: RunCreated; step: StepCreated | null }> {
  const now = context.clock.now();
  const [state, spend, scope] = await decisionInputs(context, workspaceId, input.user_id, now);
  const call: BudgetedCall = { userId: input.user_id };
  const modelPriced = firstStep ? await modelPricedInput(context, state, workspaceId, firstStep) : undefined;
  const estimate = firstStep ? await stepEstimate(context, state, workspaceId, firstStep) : null;
  const limits = resolveRunLimits(state.workspace, input.limits);
  const rate = firstStep ? state.workspace.user_steps_per_minute : null;
  // Rules 5 and 6 count runs only where the workspace has a run limit: then under its admission
  // lock, so the counts are exact and stay so until this start commits. Without one, no rule
  // reads them, and starts do not queue behind each other.
  const limited = state.workspace.monthly_run_limit !== null || state.workspace.max_concurrent_runs !== null;
  // One statement commits on its own, in a batch with the starts under way; a lock, a
  // remembered answer or a place in a user's window of steps needs a transaction of its own.
  // Reserve mode: a first step that reserves is checked and written under the workspace's
  // reservation lock (taken after the admission lock), as createStep's (step-creation.ts).
  const reserving = reservesAgainstBudget(state, estimate);
  const batched = !limited && !idempotency && !reserving && rate === null;
  const slot: { taken: StepSlot | null } = { taken: null };
  const admit = async (db: Queryable) => {
    await slot.taken?.release();
    slot.taken = null;
    let counts = NOT_COUNTED;
    if (limited) {
      await lockAdmissions(db, workspaceId);
      counts = await runCountsLessReleased(context, db, scope);
    }
    const { counted, reserved } = await budgetCounts(db, scope, spend, reserving, readsReservations(state));
    // A run started for a single proxied call is judged with its call's estimate: denied, it is BLOCKED.
    const decision = evaluate('run_start', {
      ...toSnapshot(state, { ...counted, ...counts }, now),
      ...reserveTerms(state, reserved, estimate),
      ...budgetTerms(state, call, counted, reserved, now),
    });
    const status: RunCreated['status'] = decision.outcome === 'ALLOW' ? 'RUNNING' : 'BLOCKED';
    const id = timeOrderedId(now.getTime());
    const hash = firstStep ? loopHash(limits, firstStep) : null;
    let step: runs.NewStep | undefined;
    if (status === 'RUNNING' && firstStep) {
      // A fresh run: the runaway rules read its empty usage.
      const stepSnapshot: GuardSnapshot = {
        ...toSnapshot(state, { ...counted, ...NOT_COUNTED }, now),
        ...reserveTerms(state, reserved, estimate),
        ...budgetTerms(state, call, counted, reserved, now),
        modelPriced,
        toolPolicy: firstStep ? toolPolicyInput(state, firstStep) : undefined,
        ...(limits && runRuleInputs(limits, FRESH_RUN, 0, runReserve(state.workspace, estimate))),
      };
      let stepDecision = evaluate('step', stepSnapshot);
      const stepId = timeOrderedId(now.getTime());
      if (stepDecision.outcome === 'ALLOW' && rate !== null) {
        slot.taken = await context.counters.takeStepSlot(db, scope, { limit: rate, nowMs: now.getTime(), stepId });
        stepDecision = evaluate('step', {
          ...stepSnapshot,
          userRate: userRateInput(slot.taken, rate, now.getTime()),
        });
      }
      step = newStep(context, workspaceId, id, 1, firstStep, stepDecision, now, estimate, stepId);
    }
    const allowedFirst = step?.status === 'ALLOWED';
    const run: runs.NewRun = {
      id,
      workspaceId,
      userId: input.user_id,
      status,
      metadata: input.metadata ?? null,
      apiKeyId: input.apiKeyId ?? null,
      decision,
      now,
      day: scope.day,
      firstStep: step,
      // A run started for a single proxied call: this daemon ends it, or crash recovery does.
      daemonId: firstStep?.forwarded ? (context.instance?.id ?? null) : null,
      ...(limits &&
        status === 'RUNNING' && {
          guard: {
            limits,
            allowedSteps: allowedFirst ? 1 : 0,
            lastCallHash: allowedFirst ? hash : null,
            identicalCalls: allowedFirst ? 1 : 0,
          },
        }),
    };
    const started: RunCreated = {
      id,
      user_id: input.user_id,
      status,
      decision: view(decision),
      ...(limits && status === 'RUNNING' && { limits: runLimitsView(limits) }),
    };
    if (batched) {
      const committing = context.runInserts.submit(run);
      whenDecided?.({ run: started, step: step ? createdView(step) : null });
      await committing;
    } else {
      await runs.insertRuns(db, [run]);
    }
    await remember(db, idempotency, started, now);
    return { run: started, step };
  };
  let admitted: Awaited<ReturnType<typeof admit>>;
  try {
    admitted = batched
      ? await admit(context.db)
      : await inReservationQueue(context, reserving, workspaceId, () => context.db.transaction(admit));
  } catch (error) {
    await slot.taken?.release();
    throw error;
  }
  const { run, step } = admitted;
  // The steps that follow (a proxied call's, above all) need not read the run back.
  if (run.status === 'RUNNING')
    context.runFacts.remember(`${workspaceId}/${run.id}`, { userId: input.user_id, limits });
  // Nor, after a proxied call's first step, its highest sequence. (Not told of every run: the
  // allocator would fill with runs that take no proxied step, and forget those that do.)
  if (step) {
    context.sequences.started(run.id, 1);
    rememberStep(context, step, input.user_id);
  }
  context.observe('run_start', run.decision);
  if (!step) return { run, step: null };
  const created = createdView(step);
  context.observe('step', created.decision);
  return { run, step: created };
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
