/**
 * A step's check and record: the step rules decided on the workspace's state, the day's spend,
 * and where they apply the reservations and the run's usage, then the step written, ALLOWED or
 * BLOCKED. How it is written is planned (admission-plan.ts) and carried out (admission.ts).
 */
import type { StepCreated } from '../contract/runs.js';
import { ApiError } from '../errors.js';
import { evaluate, type Decision, type GuardSnapshot } from '../rules/engine.js';
import type { IdempotencyClaim } from '../store/idempotency.js';
import * as runs from '../store/runs.js';
import { countAllowedStep } from '../store/run-usage.js';
import { timeOrderedId } from '../store/time-ordered-id.js';
import { admit, type AdmissionReads, type AdmissionTask } from './admission.js';
import { planAdmission, type AdmissionPlan } from './admission-plan.js';
import type { Decided } from './decided.js';
import { callSubjects, stepCheckInputs } from './decision-inputs.js';
import type { GuardContext } from './guard-context.js';
import { NOT_COUNTED, toSnapshot, type DecisionFacts } from './guard-snapshot.js';
import { createdView } from './guard-views.js';
import { IdempotencyRace, remember, storedAnswer } from './idempotent-answers.js';
import { addRunRuleInputs, loopHash } from './run-limits.js';
import { modelPricedInput, newStep, stepEstimate, toolPolicyInput, type StepInput } from './step-input.js';
import { rememberStep, resultsWritten } from './step-results.js';

/** Tries at taking an allocated sequence before giving up (each collision resyncs first). */
const SEQUENCE_ATTEMPTS = 10;

/** Another step of the run holds the sequence. */
class SequenceTaken extends Error {}

export async function createStep(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  input: StepInput,
  idempotency?: IdempotencyClaim,
  agentKeyId: string | null = null,
): Promise<StepCreated> {
  const replay = idempotency ? await storedAnswer<StepCreated>(context, idempotency) : null;
  if (replay) return replay;
  try {
    return await (
      await admitStep(context, workspaceId, runId, input, idempotency, agentKeyId)
    ).recorded;
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
 * A step decided and written as planned; answers once decided (a batched step's insert still
 * under way, see `Decided`). A step without a sequence takes the run's next one; when another
 * writer took that number, the next. `agentKeyId`: an agent key's step, into a run it started only.
 */
export async function admitStep(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  input: StepInput,
  idempotency?: IdempotencyClaim,
  agentKeyId: string | null = null,
): Promise<Decided<StepCreated>> {
  const now = context.clock.now();
  const keyId = input.apiKeyId ?? null;
  const [state, spend, run, scope] = await stepCheckInputs(context, workspaceId, runId, now, keyId, agentKeyId);
  const call = { userId: run.userId, subjects: callSubjects(keyId, run.tags) };
  const modelPriced = await modelPricedInput(context, state, workspaceId, input);
  const estimate = await stepEstimate(context, state, workspaceId, input);
  const plan = planAdmission({
    subject: 'step',
    state,
    runLimits: run.limits,
    estimateMicros: estimate,
    idempotent: idempotency !== undefined,
  });
  // The run's budget reads its recorded cost: results of this run still on their way count.
  if (run.limits?.maxCostMicros != null) await resultsWritten(context, runId);
  const id = timeOrderedId(now.getTime());
  const hash = loopHash(run.limits, input);
  const facts: DecisionFacts = { call, estimateMicros: estimate, now };
  const toolPolicy = toolPolicyInput(state, input);
  const decide = (reads: AdmissionReads, userRate?: GuardSnapshot['userRate']): Decision => {
    const { counted, reserved, usage } = reads;
    const snapshot = toSnapshot(state, facts, counted, reserved, NOT_COUNTED);
    snapshot.modelPriced = modelPriced;
    snapshot.toolPolicy = toolPolicy;
    snapshot.userRate = userRate;
    if (run.limits && usage) {
      const identicalCalls = hash !== null && usage.lastCallHash === hash ? usage.identicalCalls : 0;
      addRunRuleInputs(snapshot, run.limits, usage, identicalCalls);
    }
    return evaluate('step', snapshot);
  };
  const task = (sequence: number): AdmissionTask<runs.NewStep> => ({
    workspaceId,
    runId,
    scope,
    spend,
    now,
    stepId: id,
    decide: (reads, userRate) =>
      newStep(context, workspaceId, runId, sequence, input, decide(reads, userRate), now, estimate, id),
    takesSlot: (step) => step.status === 'ALLOWED',
    write: async (tx, step, { usage }, rememberAnswer) => {
      const [outcome] = await runs.insertSteps(tx, [step]);
      throwOnConflict(outcome!);
      if (usage && step.status === 'ALLOWED') {
        const identicalCalls = hash !== null && usage.lastCallHash === hash ? usage.identicalCalls : 0;
        await countAllowedStep(tx, runId, { hash, identicalCalls: identicalCalls + 1 });
      }
      if (rememberAnswer) await remember(tx, idempotency, createdView(step), now);
    },
    submit: async (step) => throwOnConflict(await context.stepInserts.submit(step)),
  });
  const given = input.sequence ?? null;
  const admitted =
    given === null ? await withAllocatedSequence(context, runId, plan, task) : await admit(context, plan, task(given));
  const recorded = admitted.recorded.then(async (written) => {
    if (given !== null) await context.sequences.observe(runId, given);
    rememberStep(context, written, run.userId, run.tags);
    const answer = createdView(written);
    context.observe('step', answer.decision);
    return answer;
  });
  return { decided: createdView(admitted.decided), recorded };
}

function throwOnConflict(outcome: runs.StepInsertOutcome): void {
  if (outcome === 'run_not_running') throw new ApiError('RUN_NOT_RUNNING');
  if (outcome === 'duplicate_sequence') throw new SequenceTaken();
}

/**
 * Admits with the run's next sequence; when another writer took that number, with the next. A
 * batched step's decision was told before its insert failed: it is written again as decided.
 */
async function withAllocatedSequence(
  context: GuardContext,
  runId: string,
  plan: AdmissionPlan,
  task: (sequence: number) => AdmissionTask<runs.NewStep>,
): Promise<Decided<runs.NewStep>> {
  const nextSequence = async () => context.sequences.next(runId) ?? (await context.sequences.allocate(runId));
  const again = async (error: unknown, attempt: number): Promise<number> => {
    if (!(error instanceof SequenceTaken) || attempt >= SEQUENCE_ATTEMPTS) throw error;
    await context.sequences.resync(runId);
    return nextSequence();
  };
  if (plan.kind !== 'batched') {
    for (let attempt = 1, sequence = await nextSequence(); ; attempt++) {
      try {
        return await admit(context, plan, task(sequence));
      } catch (error) {
        sequence = await again(error, attempt);
      }
    }
  }
  const first = await admit(context, plan, task(await nextSequence()));
  const resubmit = async (step: runs.NewStep, attempt: number): Promise<runs.NewStep> => {
    try {
      await task(step.sequence).submit(step);
      return step;
    } catch (error) {
      return resubmit({ ...step, sequence: await again(error, attempt) }, attempt + 1);
    }
  };
  const recorded = first.recorded.catch(async (error: unknown) =>
    resubmit({ ...first.decided, sequence: await again(error, 1) }, 2),
  );
  return { decided: first.decided, recorded };
}
