/**
 * A step's check and record: the step rules decided on the workspace's state, the day's spend,
 * and where they apply the reservations and the run's usage, then the step written, ALLOWED or
 * BLOCKED. Three ways to write it: in a batch with the steps of the same moment (the common case,
 * and the proxy's), in a transaction of its own (a remembered answer, a reservation), or decided
 * in the runaway rules' transaction (a run with limits, a user rate).
 */
import { ApiError } from '../errors.js';
import { evaluate, type Decision, type GuardSnapshot } from '../rules/engine.js';
import type { CounterScope, DailySpend } from '../store/counters/counters.js';
import type { IdempotencyClaim } from '../store/idempotency.js';
import { NO_RESERVATIONS, type Reserved } from '../store/reservations.js';
import * as runs from '../store/runs.js';
import type { StepSlot } from '../store/counters/step-rate.js';
import { timeOrderedId } from '../store/time-ordered-id.js';
import type { RunLimitValues } from '../store/workspaces.js';
import {
  budgetCounts,
  decideReserving,
  inReservationQueue,
  scopeReservations,
  stepCheckInputs,
} from './decision-inputs.js';
import type { GuardContext } from './guard-context.js';
import {
  budgetTerms,
  NOT_COUNTED,
  readsReservations,
  reservesAgainstBudget,
  reserveTerms,
  toSnapshot,
} from './guard-snapshot.js';
import { createdView } from './guard-views.js';
import type { StepCreated } from '../contract/runs.js';
import { IdempotencyRace, remember, storedAnswer } from './idempotent-answers.js';
import { guarded, loopHash, runReserve, runRuleInputs, userRateInput } from './run-limits.js';
import { modelPricedInput, newStep, stepEstimate, toolPolicyInput, type StepInput } from './step-input.js';
import { rememberStep, resultsWritten } from './step-results.js';

/** Tries at taking an allocated sequence before giving up (each collision resyncs first). */
const SEQUENCE_ATTEMPTS = 10;

/** Another step of the run holds the sequence. */
class SequenceTaken extends Error {}

/** A step check that takes the runaway rules' transaction: a run with limits, or a user rate. */
interface GuardedStep {
  workspaceId: string;
  runId: string;
  userId: string;
  id: string;
  scope: CounterScope;
  input: Omit<StepInput, 'sequence'>;
  limits: RunLimitValues | null;
  userStepsPerMinute: number | null;
  now: Date;
  /** Reserve mode, a step that reserves: decided on spend and reservations read under their lock. */
  reserving: boolean;
  /** Reserve mode with a daily budget: the budget rules count reservations. */
  readsReservations: boolean;
  /** The day's spend read before (what a step that does not reserve is decided on). */
  spend: DailySpend;
  /** Rules 1 to 11 on what was read, with the runaway rules' inputs. */
  decide(counted: DailySpend, reserved: Reserved, runaway: Partial<GuardSnapshot>): Decision;
  /** The step as written with `decision` and `sequence`. */
  step(decision: Decision, sequence: number): runs.NewStep;
  /** Reserve mode: the run budget counts reservations and this estimate; null in spend mode. */
  reserve: { estimateMicros: number | null } | null;
}

export async function createStep(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  input: StepInput,
  idempotency?: IdempotencyClaim,
  /** Told once the step is decided and its insert submitted (`decideStep`). */
  whenDecided?: (decided: StepCreated) => void,
): Promise<StepCreated> {
  const replay = idempotency ? await storedAnswer<StepCreated>(context, idempotency) : null;
  if (replay) return replay;
  const now = context.clock.now();
  const [state, spend, run, scope] = await stepCheckInputs(context, workspaceId, runId, now);
  const modelPriced = await modelPricedInput(context, state, workspaceId, input);
  const estimate = await stepEstimate(context, state, workspaceId, input);
  const decide = (counted: DailySpend, reserved: Reserved, runaway: Partial<GuardSnapshot> = {}) =>
    evaluate('step', {
      ...toSnapshot(state, { ...counted, ...NOT_COUNTED }, now),
      ...reserveTerms(state, reserved, estimate),
      modelPriced,
      toolPolicy: toolPolicyInput(state, input),
      ...budgetTerms(state, { userId: run.userId }, counted, reserved, now),
      ...runaway,
    });
  // Reserve mode: a step that reserves is checked and written under its workspace's
  // reservation lock, so racing checks (in any daemon) each count the others' reservations.
  // One that reserves nothing adds no cost: it reads the reservations, unlocked.
  const reserving = reservesAgainstBudget(state, estimate);
  const id = timeOrderedId(now.getTime());
  const step = (decision: Decision, sequence: number) =>
    newStep(context, workspaceId, runId, sequence, input, decision, now, estimate, id);
  // Writes the step with `sequence`; answers the step written. A run with limits, or a user
  // rate, decides in the step's transaction (writeGuardedStep).
  const runaway = guarded(state.workspace, run.limits);
  const unlockedDecision =
    reserving || runaway
      ? null
      : decide(spend, readsReservations(state) ? await scopeReservations(context.db, scope) : NO_RESERVATIONS);
  // The run's budget reads its recorded cost: results of this run still on their way count.
  if (run.limits?.maxCostMicros != null) await resultsWritten(context, runId);
  const insert = async (sequence: number): Promise<runs.NewStep> => {
    if (runaway)
      return inReservationQueue(context, reserving, workspaceId, () =>
        writeGuardedStep(
          context,
          {
            workspaceId,
            runId,
            userId: run.userId,
            id,
            scope,
            input,
            limits: run.limits,
            userStepsPerMinute: state.workspace.user_steps_per_minute,
            now,
            reserving,
            readsReservations: readsReservations(state),
            spend,
            decide,
            step,
            reserve: runReserve(state.workspace, estimate),
          },
          sequence,
          idempotency,
        ),
      );
    // A remembered answer or a reservation commits with its step, in a transaction of its own;
    // any other step shares its statement and commit with the steps written at the same moment.
    const [written, outcome] =
      idempotency || reserving
        ? await inReservationQueue(context, reserving, workspaceId, () =>
            context.db.transaction(async (tx) => {
              const decision = unlockedDecision ?? (await decideReserving(tx, scope, decide));
              const candidate = step(decision, sequence);
              const [inserted] = await runs.insertSteps(tx, [candidate]);
              if (inserted === 'inserted') await remember(tx, idempotency, createdView(candidate), now);
              return [candidate, inserted!] as const;
            }),
          )
        : await (async () => {
            const candidate = step(unlockedDecision!, sequence);
            const inserting = context.stepInserts.submit(candidate);
            // Decided, its insert under way: a proxied call is forwarded from here (decideStep).
            whenDecided?.(createdView(candidate));
            return [candidate, await inserting] as const;
          })();
    if (outcome === 'run_not_running') throw new ApiError('RUN_NOT_RUNNING');
    if (outcome === 'duplicate_sequence') throw new SequenceTaken();
    return written;
  };
  try {
    const given = input.sequence ?? null;
    const written = given === null ? await withAllocatedSequence(context, runId, insert) : await insert(given);
    if (given !== null) await context.sequences.observe(runId, given);
    rememberStep(context, written, run.userId);
    const recorded = createdView(written);
    context.observe('step', recorded.decision);
    return recorded;
  } catch (error) {
    // A concurrent twin of an idempotent request took the sequence first: answer as it did.
    const twin =
      error instanceof IdempotencyRace || error instanceof SequenceTaken
        ? await storedAnswer<StepCreated>(context, idempotency)
        : null;
    if (twin) return twin;
    if (error instanceof SequenceTaken) throw new ApiError('DUPLICATE_SEQUENCE');
    throw error;
  }
}

/**
 * A step of a run with limits, or of a user with a rate: decided and written in one transaction.
 * A run with limits is locked first (every daemon's checks of the run take turns, each counting
 * the steps allowed before it); then, if rules 1 to 10 allow, the step takes a place in its
 * user's window of steps (exact: one Redis script, or the database under a per-user lock), and
 * the step is written with its run's usage. A place taken by a step that is not written is given
 * back.
 */
async function writeGuardedStep(
  context: GuardContext,
  check: GuardedStep,
  sequence: number,
  idempotency: IdempotencyClaim | undefined,
): Promise<runs.NewStep> {
  const { workspaceId, runId, limits, now, scope } = check;
  const rate = check.userStepsPerMinute;
  const slot: { taken: StepSlot | null } = { taken: null };
  try {
    return await context.db.transaction(async (tx) => {
      // A transaction run again (a deadlock victim) takes its place again.
      await slot.taken?.release();
      slot.taken = null;
      // The run's lock first, then the workspace's reservation lock: a run with limits takes
      // both in this order everywhere, and a step that takes only the latter locks no such run.
      const reservations = check.reserve !== null && limits?.maxCostMicros != null;
      const usage = limits ? await runs.lockRunUsage(tx, workspaceId, runId, { reservations }) : null;
      if (limits && !usage) throw new ApiError('RUN_NOT_FOUND');
      if (usage && usage.status !== 'RUNNING') throw new ApiError('RUN_NOT_RUNNING');
      const { counted, reserved } = await budgetCounts(
        tx,
        scope,
        check.spend,
        check.reserving,
        check.readsReservations,
      );
      const hash = loopHash(limits, check.input);
      const identicalCalls = usage && hash !== null && usage.lastCallHash === hash ? usage.identicalCalls : 0;
      const runaway: Partial<GuardSnapshot> =
        limits && usage ? runRuleInputs(limits, usage, identicalCalls, check.reserve) : {};
      let decision = check.decide(counted, reserved, runaway);
      if (decision.outcome === 'ALLOW' && rate !== null) {
        slot.taken = await context.counters.takeStepSlot(tx, scope, {
          limit: rate,
          nowMs: now.getTime(),
          stepId: check.id,
        });
        decision = check.decide(counted, reserved, {
          ...runaway,
          userRate: userRateInput(slot.taken, rate, now.getTime()),
        });
      }
      const step = check.step(decision, sequence);
      const [outcome] = await runs.insertSteps(tx, [step]);
      if (outcome === 'run_not_running') throw new ApiError('RUN_NOT_RUNNING');
      if (outcome === 'duplicate_sequence') throw new SequenceTaken();
      if (usage && step.status === 'ALLOWED')
        await runs.countAllowedStep(tx, runId, { hash, identicalCalls: identicalCalls + 1 });
      await remember(tx, idempotency, createdView(step), now);
      return step;
    });
  } catch (error) {
    await slot.taken?.release();
    throw error;
  }
}

/** Inserts with the run's next sequence; when another writer took that number, with the next. */
async function withAllocatedSequence<T>(
  context: GuardContext,
  runId: string,
  insert: (sequence: number) => Promise<T>,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const sequence = context.sequences.next(runId) ?? (await context.sequences.allocate(runId));
    try {
      return await insert(sequence);
    } catch (error) {
      if (!(error instanceof SequenceTaken) || attempt >= SEQUENCE_ATTEMPTS) throw error;
      await context.sequences.resync(runId);
    }
  }
}
