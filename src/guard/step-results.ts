/**
 * A step's result: its record finished (status, tokens, cost), the day's spend counters raised,
 * and, from the moment its answer is released until both hold it, its cost counted as this
 * daemon's pending spend and the write kept among its run's results in flight.
 */
import { ApiError } from '../errors.js';
import { callCostMicros, isPriced, type TokenPrices } from '../money/cost.js';
import { localDay } from '../periods.js';
import { scopeAt, SPEND_CAP_MICROS, type CounterScope } from '../store/counters/counters.js';
import type { IdempotencyClaim } from '../store/idempotency.js';
import * as runs from '../store/runs.js';
import { type FinishedStep, finishSteps, type StepFinish, type StepResult } from '../store/step-finish.js';
import { zoneOf } from './decision-inputs.js';
import type { GuardContext } from './guard-context.js';
import type { StepUpdated } from '../contract/runs.js';
import { remember, replayOnConflict, storedAnswer } from './idempotent-answers.js';
import { assertRunOfCaller } from './run-owner.js';

/**
 * A MODEL_CALL step allowed here: its result's cost will be held as pending spend (priced by the
 * model its answer names when the step names none).
 */
export function rememberStep(
  context: GuardContext,
  step: runs.NewStep,
  userId: string,
  /** The call's subjects (`callSubjects`: its key's, its run's tags'). */
  subjects: readonly string[],
): void {
  if (step.status === 'ALLOWED' && step.type === 'MODEL_CALL')
    context.stepFacts.remember(step.id, { userId, model: step.model, subjects });
}

export async function finishStep(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  stepId: string,
  result: StepResult,
  idempotency?: IdempotencyClaim,
  agentKeyId: string | null = null,
): Promise<StepUpdated> {
  const replay = idempotency ? await storedAnswer<StepUpdated>(context, idempotency) : null;
  if (replay) return replay;
  await assertRunOfCaller(context, workspaceId, runId, agentKeyId);
  const now = context.clock.now();
  const zone = await zoneOf(context, workspaceId);
  const finish: StepFinish = {
    workspaceId,
    runId,
    stepId,
    result,
    now,
    day: localDay(now, zone).day,
  };
  const release = holdSpend(context, finish, zone);
  const written = replayOnConflict(context, idempotency, async () => {
    // A remembered answer commits with the result, in a transaction of its own; any other
    // result shares its statement and commit with the results written at the same moment.
    const finished = idempotency
      ? await context.db.transaction(async (tx) => {
          const [step] = await finishSteps(tx, [finish]);
          if (step) await remember(tx, idempotency, { id: step.id, status: step.status }, now);
          return step ?? null;
        })
      : await context.stepFinishes.submit(finish);
    return afterFinish(context, finish, finished, zone);
  }).finally(release);
  return inFlight(context, runId, written);
}

/**
 * The result of a step whose caller is not waiting for this answer (a proxied call, already
 * answered): it shares a statement with the results of the next few milliseconds.
 */
export function recordResult(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  stepId: string,
  result: StepResult,
): Promise<StepUpdated> {
  const now = context.clock.now();
  // Submitted at once when the zone is known (it is, after this daemon's decision of the step):
  // whoever settles the service next finds the result among those waiting.
  const known = context.shapes.get(workspaceId)?.timeZone;
  if (known !== undefined) return submitResult(context, workspaceId, runId, stepId, result, now, known);
  return zoneOf(context, workspaceId).then((zone) =>
    submitResult(context, workspaceId, runId, stepId, result, now, zone),
  );
}

function submitResult(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  stepId: string,
  result: StepResult,
  now: Date,
  zone: string,
): Promise<StepUpdated> {
  return inFlight(context, runId, lingeringResult(context, workspaceId, runId, stepId, result, now, zone));
}

/**
 * A result into the lingering group commit, its cost held meanwhile. One async function, where
 * a chain of `then` and `finally` made promises and callbacks: every proxied call's result
 * comes here.
 */
async function lingeringResult(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  stepId: string,
  result: StepResult,
  now: Date,
  zone: string,
): Promise<StepUpdated> {
  const finish: StepFinish = { workspaceId, runId, stepId, result, now, day: localDay(now, zone).day };
  const release = holdSpend(context, finish, zone);
  try {
    return await afterFinish(context, finish, await context.lingeringResults.submit(finish), zone);
  } finally {
    release();
  }
}

/**
 * Holds a result's cost as pending spend from now (its answer is released) until its record
 * and the counters hold it; answers the function that stops holding it. Priced as the record
 * will be, from the model's active prices.
 */
function holdSpend(context: GuardContext, finish: StepFinish, zone: string): () => void {
  const facts = context.stepFacts.get(finish.stepId);
  const { result } = finish;
  const model = facts?.model ?? result.model ?? null;
  if (!facts || model === null) return NOTHING_HELD;
  const tokens = {
    promptTokens: result.promptTokens,
    completionTokens: result.completionTokens,
    cacheReadTokens: result.cacheReadTokens ?? null,
    cacheWriteTokens: result.cacheWriteTokens ?? null,
  };
  if (!isPriced(tokens)) return NOTHING_HELD;
  // Priced as the record will be (src/money/cost.ts is the one definition), capped as the counters
  // are; at once when the prices are read already (the step's check read them).
  const costAt = (prices: TokenPrices | null) => {
    if (prices) return Math.min(Number(callCostMicros(tokens, prices)!), SPEND_CAP_MICROS);
    unpricedCall(context, finish.workspaceId, model);
    return 0;
  };
  const known = context.prices.known(finish.workspaceId, model);
  const cost = known !== undefined ? costAt(known) : context.prices.prices(finish.workspaceId, model).then(costAt);
  const { day, month } = localDay(finish.now, zone);
  const scope: CounterScope = {
    workspaceId: finish.workspaceId,
    userId: facts.userId,
    day,
    month,
    subjects: facts.subjects,
  };
  return context.pending.add(scope, cost);
}

const NOTHING_HELD = (): void => undefined;

/** Unpriced spend is invisible to budgets: say so (a metric per call, a warning per model and workspace). */
function unpricedCall(context: GuardContext, workspaceId: string, model: string): void {
  try {
    context.observer?.unpricedCall?.();
  } catch (error) {
    context.log.warn({ err: error }, 'guard observer failed');
  }
  const key = `${workspaceId}\u0000${model}`;
  if (context.warnedUnpriced.get(key)) return;
  context.warnedUnpriced.remember(key, true);
  context.log.warn(
    { workspaceId, model },
    'a model call was recorded without a price: its cost counts $0 against every budget (set a price, or unpriced_models "deny")',
  );
}

/** A step's result as recorded; the user and cost are for the proxy's log line, never sent. */
export interface RecordedStep extends StepUpdated {
  userId: string;
  costMicros: number;
}

/**
 * A result's statement answered: why nothing was finished, or the spend copy raised and the
 * answer. Not async: a result that cost nothing is answered at once, and one that did after
 * its raise alone.
 */
function afterFinish(
  context: GuardContext,
  finish: StepFinish,
  finished: FinishedStep | null,
  zone: string,
): RecordedStep | Promise<RecordedStep> {
  if (!finished) return notFinished(context, finish);
  context.stepFacts.forget(finish.stepId);
  const recorded: RecordedStep = {
    id: finished.id,
    status: finished.status,
    userId: finished.user_id,
    costMicros: finished.cost_micros,
  };
  if (!finished.totals) return recorded;
  return context.counters
    .spendRecorded(scopeAt(finish.now, finish.workspaceId, finished.user_id, zone), finished.totals)
    .then(() => recorded);
}

/** Why a result's statement finished nothing: the step is finished already, or is not there. */
async function notFinished(context: GuardContext, finish: StepFinish): Promise<never> {
  if (await runs.stepExists(context.db, finish.workspaceId, finish.runId, finish.stepId))
    throw new ApiError('STEP_ALREADY_FINISHED');
  throw new ApiError('STEP_NOT_FOUND');
}

/** Keeps `result` among the run's results in flight until it settles. */
function inFlight<T>(context: GuardContext, runId: string, result: Promise<T>): Promise<T> {
  let results = context.resultsInFlight.get(runId);
  if (!results) context.resultsInFlight.set(runId, (results = new Set()));
  results.add(result);
  const forget = () => {
    results.delete(result);
    if (results.size === 0 && context.resultsInFlight.get(runId) === results) context.resultsInFlight.delete(runId);
  };
  result.then(forget, forget);
  return result;
}

/** Resolves once the run's results this daemon is writing now are written (or failed). */
export async function resultsWritten(context: GuardContext, runId: string): Promise<void> {
  const results = context.resultsInFlight.get(runId);
  if (results) await Promise.allSettled([...results]);
}
