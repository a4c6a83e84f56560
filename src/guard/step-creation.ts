/**
 * A step's check and record: the step rules decided on the workspace's state, the day's spend,
 * and where they apply the reservations and the run's usage, then the step written, ALLOWED or
 * BLOCKED. How it is written is planned (admission-plan.ts) and carried out (admission.ts).
 */
import type { StepCreated } from '../contract/runs.js';
import { ApiError } from '../errors.js';
import { evaluate, type Decision, type GuardSnapshot } from '../rules/engine.js';
import type { CounterScope, DailySpend } from '../store/counters/counters.js';
import type { Queryable } from '../store/db.js';
import type { IdempotencyClaim } from '../store/idempotency.js';
import * as runs from '../store/runs.js';
import { countAllowedStep, type RunUsage } from '../store/run-usage.js';
import { timeOrderedId } from '../store/time-ordered-id.js';
import type { GuardState } from '../store/workspaces.js';
import { admit, type AdmissionReads, type AdmissionTask } from './admission.js';
import { planAdmission, type AdmissionPlan } from './admission-plan.js';
import type { Decided } from './decided.js';
import { decisionInputs, firstStepCheckInputs, knownRun, subjectsOfCall } from './decision-inputs.js';
import type { GuardContext, RunFacts } from './guard-context.js';
import { NOT_COUNTED, toSnapshot, type DecisionFacts } from './guard-snapshot.js';
import { createdView } from './guard-views.js';
import { IdempotencyRace, remember, storedAnswer } from './idempotent-answers.js';
import { addRunRuleInputs, loopHash } from './run-limits.js';
import { modelPricedInput, newStep, stepEstimate, stepPrices, toolPolicyInput, type StepInput } from './step-input.js';
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
  // A run seen before: its user and limits are known, whether it still runs is left to the insert.
  const known = knownRun(context, workspaceId, runId, agentKeyId);
  let state: GuardState, spend: DailySpend, scope: CounterScope, run: RunFacts;
  if (known) {
    [state, spend, scope] = await decisionInputs(context, workspaceId, known.userId, now, subjectsOfCall(known, keyId));
    run = known;
  } else [state, spend, scope, run] = await firstStepCheckInputs(context, workspaceId, runId, now, keyId, agentKeyId);
  const pricing = stepPrices(context, state, workspaceId, input);
  const prices = pricing instanceof Promise ? await pricing : pricing;
  const modelPriced = modelPricedInput(state, input, prices);
  const estimate = stepEstimate(state, input, prices);
  const plan = planAdmission({
    subject: 'step',
    state,
    runLimits: run.limits,
    estimateMicros: estimate,
    idempotent: idempotency !== undefined,
  });
  // The run's budget reads its recorded cost: results of this run still on their way count.
  if (run.limits?.maxCostMicros != null) await resultsWritten(context, runId);
  const facts: DecisionFacts = {
    call: { userId: run.userId, subjects: subjectsOfCall(run, keyId) },
    estimateMicros: estimate,
    now,
  };
  const step = new StepAdmission(
    context,
    workspaceId,
    runId,
    input,
    idempotency,
    state,
    run,
    scope,
    spend,
    facts,
    modelPriced,
  );
  // A batched step whose number this daemon knows at once is admitted without a wait.
  const admitted =
    step.allocated && !(plan.kind === 'batched' && step.nextAtOnce())
      ? await withAllocatedSequence(context, plan, step)
      : await admit(context, plan, step);
  return { decided: createdView(admitted.decided), recorded: step.answer(admitted.recorded) };
}

function throwOnConflict(outcome: runs.StepInsertOutcome): void {
  if (outcome === 'run_not_running') throw new ApiError('RUN_NOT_RUNNING');
  if (outcome === 'duplicate_sequence') throw new SequenceTaken();
}

/**
 * A step as the executor (admission.ts) admits it: what its rules are decided on, read once, and
 * its write. Its work is in its methods, not in closures made for each step: a proxied call
 * admits one, and the closures were the largest allocation of its admission. `sequence` is the
 * number it is admitted with: the caller's, or the run's next, moved on when another writer took it.
 */
class StepAdmission implements AdmissionTask<runs.NewStep> {
  readonly stepId: string;
  /** The caller named no sequence: this daemon allocates it, and takes the next on a collision. */
  readonly allocated: boolean;
  readonly now: Date;
  sequence: number;
  private readonly toolPolicy: GuardSnapshot['toolPolicy'];
  /** The loop rule's hash of the call (null: the run has no such limit). */
  private readonly hash: string | null;

  constructor(
    private readonly context: GuardContext,
    readonly workspaceId: string,
    readonly runId: string,
    private readonly input: StepInput,
    private readonly idempotency: IdempotencyClaim | undefined,
    private readonly state: GuardState,
    private readonly run: RunFacts,
    readonly scope: CounterScope,
    readonly spend: DailySpend,
    /** Who makes the call, its estimate, the moment. */
    private readonly facts: DecisionFacts,
    private readonly modelPriced: GuardSnapshot['modelPriced'],
  ) {
    this.now = facts.now;
    this.stepId = timeOrderedId(facts.now.getTime());
    this.sequence = input.sequence ?? 0;
    this.allocated = input.sequence === undefined || input.sequence === null;
    this.toolPolicy = toolPolicyInput(state, input);
    this.hash = loopHash(run.limits, input);
  }

  decide(reads: AdmissionReads, userRate?: GuardSnapshot['userRate']): runs.NewStep {
    const { context, input, now, facts } = this;
    const decision = this.evaluate(reads, userRate);
    const estimate = facts.estimateMicros;
    return newStep(context, this.workspaceId, this.runId, this.sequence, input, decision, now, estimate, this.stepId);
  }

  takesSlot(step: runs.NewStep): boolean {
    return step.status === 'ALLOWED';
  }

  async write(tx: Queryable, step: runs.NewStep, { usage }: AdmissionReads, rememberAnswer: boolean): Promise<void> {
    const [outcome] = await runs.insertSteps(tx, [step]);
    throwOnConflict(outcome!);
    if (usage && step.status === 'ALLOWED')
      await countAllowedStep(tx, this.runId, { hash: this.hash, identicalCalls: this.identicalCalls(usage) + 1 });
    if (rememberAnswer) await remember(tx, this.idempotency, createdView(step), this.now);
  }

  /**
   * Into the steps' group commit. An allocated number another writer took meanwhile: the step
   * was decided and told with it, and is written again as decided with the run's next number.
   */
  async submit(step: runs.NewStep): Promise<runs.NewStep> {
    for (let attempt = 1; ; attempt++) {
      const outcome = await this.context.stepInserts.submit(step);
      if (outcome !== 'duplicate_sequence' || !this.allocated) {
        throwOnConflict(outcome);
        return step;
      }
      step = { ...step, sequence: await this.nextAfter(new SequenceTaken(), attempt) };
    }
  }

  /** Takes the run's next number when this daemon knows its highest; false: `next` waits for it. */
  nextAtOnce(): boolean {
    const next = this.context.sequences.next(this.runId);
    if (next === undefined) return false;
    this.sequence = next;
    return true;
  }

  /** The run's next number, without a wait when this daemon knows its highest. */
  async next(): Promise<number> {
    const { sequences } = this.context;
    return (this.sequence = sequences.next(this.runId) ?? (await sequences.allocate(this.runId)));
  }

  /** The next number after `error`, another writer's taking the last (else `error` is thrown). */
  async nextAfter(error: unknown, attempt: number): Promise<number> {
    if (!(error instanceof SequenceTaken) || attempt >= SEQUENCE_ATTEMPTS) throw error;
    await this.context.sequences.resync(this.runId);
    return this.next();
  }

  /** The answer once the step is written; what this daemon then knows of the run. */
  async answer(recorded: Promise<runs.NewStep>): Promise<StepCreated> {
    const written = await recorded;
    const { context, run } = this;
    if (!this.allocated) await context.sequences.observe(this.runId, written.sequence);
    rememberStep(context, written, run.userId, this.facts.call.subjects);
    const answer = createdView(written);
    context.observe('step', answer.decision);
    return answer;
  }

  private evaluate(reads: AdmissionReads, userRate: GuardSnapshot['userRate']): Decision {
    const { state, run } = this;
    const snapshot = toSnapshot(state, this.facts, reads.counted, reads.reserved, NOT_COUNTED);
    snapshot.modelPriced = this.modelPriced;
    snapshot.toolPolicy = this.toolPolicy;
    snapshot.userRate = userRate;
    if (run.limits && reads.usage)
      addRunRuleInputs(snapshot, run.limits, reads.usage, this.identicalCalls(reads.usage));
    return evaluate('step', snapshot);
  }

  private identicalCalls(usage: RunUsage): number {
    return this.hash !== null && usage.lastCallHash === this.hash ? usage.identicalCalls : 0;
  }
}

/**
 * Admits with the run's next sequence; when another writer took that number, with the next. (A
 * batched step's insert moves on to the next number itself: see `StepAdmission.submit`.)
 */
async function withAllocatedSequence(
  context: GuardContext,
  plan: AdmissionPlan,
  step: StepAdmission,
): Promise<Decided<runs.NewStep>> {
  await step.next();
  if (plan.kind === 'batched') return admit(context, plan, step);
  for (let attempt = 1; ; attempt++) {
    try {
      return await admit(context, plan, step);
    } catch (error) {
      await step.nextAfter(error, attempt);
    }
  }
}
