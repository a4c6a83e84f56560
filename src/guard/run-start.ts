/**
 * A run's start: the run-start rules decided on the workspace's state, spend and (where it has a
 * run limit) its run counts, then the run written, RUNNING or BLOCKED. A run of a proxied call's
 * own starts with that call's step, decided on the same inputs and written in the same commit.
 * How it is written is planned (admission-plan.ts) and carried out (admission.ts) as a step's is.
 */
import type { RunCreated, RunLimitsRequest, StepCreated } from '../contract/runs.js';
import { evaluate, type GuardSnapshot } from '../rules/engine.js';
import type { IdempotencyClaim } from '../store/idempotency.js';
import * as runs from '../store/runs.js';
import { timeOrderedId } from '../store/time-ordered-id.js';
import type { RunLimitValues } from '../store/workspaces.js';
import { admit, type AdmissionReads, type AdmissionTask } from './admission.js';
import { planAdmission } from './admission-plan.js';
import type { Decided } from './decided.js';
import { callSubjects, decisionInputs } from './decision-inputs.js';
import type { GuardContext } from './guard-context.js';
import { NOT_COUNTED, toSnapshot, type DecisionFacts } from './guard-snapshot.js';
import { createdView, view } from './guard-views.js';
import { IdempotencyRace, remember, storedAnswer } from './idempotent-answers.js';
import { addRunRuleInputs, FRESH_RUN, loopHash, resolveRunLimits, runLimitsView } from './run-limits.js';
import { modelPricedInput, newStep, stepEstimate, stepPrices, toolPolicyInput, type StepInput } from './step-input.js';
import { rememberStep } from './step-results.js';
import type { GuardState } from '../store/workspaces.js';
import type { CounterScope } from '../store/counters/counters.js';

/** What a start takes: the run API's body. */
export interface RunStartInput {
  user_id: string;
  metadata?: unknown;
  limits?: RunLimitsRequest;
  /** Its tags, bounded by the caller's schema (the API's, the proxy's header); absent: none. */
  tags?: Record<string, string>;
  /** The API key that starts it (not on the wire: the caller's credential). */
  apiKeyId?: string | null;
}

/** A run started, with its proxied call's first step (null when none, or the run is BLOCKED). */
export interface RunBegun {
  run: RunCreated;
  step: StepCreated | null;
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
    return (await (await beginRun(context, workspaceId, input, idempotency, null)).recorded).run;
  } catch (error) {
    if (error instanceof IdempotencyRace) return (await storedAnswer<RunCreated>(context, idempotency))!;
    throw error;
  }
}

/**
 * A run's start, alone (the API's) or with a proxied call's first step (`decideRunWithStep`).
 * Answers once decided; `recorded` settles once the run (and step) are durable.
 */
export async function beginRun(
  context: GuardContext,
  workspaceId: string,
  input: RunStartInput,
  idempotency: IdempotencyClaim | undefined,
  firstStep: Omit<StepInput, 'sequence'> | null,
): Promise<Decided<RunBegun>> {
  const now = context.clock.now();
  const subjects = callSubjects(input.apiKeyId, input.tags ?? {});
  const [state, spend, scope] = await decisionInputs(context, workspaceId, input.user_id, now, subjects);
  const pricing = firstStep && stepPrices(context, state, workspaceId, firstStep);
  const prices = pricing instanceof Promise ? await pricing : pricing;
  const estimate = firstStep ? stepEstimate(state, firstStep, prices) : null;
  const start: RunStart = {
    context,
    workspaceId,
    input,
    state,
    scope,
    now,
    estimate,
    facts: { call: { userId: input.user_id, subjects }, estimateMicros: estimate, now },
    firstStep,
    modelPriced: firstStep ? modelPricedInput(state, firstStep, prices) : undefined,
    limits: resolveRunLimits(state.workspace, input.limits),
    id: timeOrderedId(now.getTime()),
  };
  const plan = planAdmission({
    subject: firstStep ? 'run_with_step' : 'run',
    state,
    runLimits: null,
    estimateMicros: estimate,
    idempotent: idempotency !== undefined,
  });
  const admitted = await admit(context, plan, runStartTask(start, spend, idempotency));
  const recorded = admitted.recorded.then((written) => afterStart(start, written));
  return { decided: answerOf(admitted.decided), recorded };
}

/** What a run start decides on, read once before the plan is carried out. */
interface RunStart {
  context: GuardContext;
  workspaceId: string;
  input: RunStartInput;
  state: GuardState;
  scope: CounterScope;
  now: Date;
  estimate: number | null;
  /** What the start's rules (and its first step's) are decided on, beside the reads. */
  facts: DecisionFacts;
  firstStep: Omit<StepInput, 'sequence'> | null;
  modelPriced: GuardSnapshot['modelPriced'];
  limits: RunLimitValues | null;
  id: string;
}

/** A run decided: the record to write, and its first step's. */
interface DecidedRun {
  run: runs.NewRun;
  step: runs.NewStep | undefined;
  started: RunCreated;
}

function runStartTask(
  start: RunStart,
  spend: AdmissionTask<DecidedRun>['spend'],
  idempotency: IdempotencyClaim | undefined,
): AdmissionTask<DecidedRun> {
  const { context, workspaceId, scope, now } = start;
  const stepId = timeOrderedId(now.getTime());
  return {
    workspaceId,
    runId: null,
    scope,
    spend,
    now,
    stepId,
    decide: (reads, userRate) => decideRun(start, stepId, reads, userRate),
    takesSlot: (decided) => decided.step?.status === 'ALLOWED',
    write: async (tx, decided, _reads, rememberAnswer) => {
      await runs.insertRuns(tx, [decided.run]);
      if (rememberAnswer) await remember(tx, idempotency, decided.started, now);
    },
    submit: (decided) => context.runInserts.submit(decided.run).then(() => decided),
  };
}

/**
 * The run-start rules on what was read; a run started for a single proxied call is judged with its call's
 * estimate (denied, it is BLOCKED), and its first step on a fresh run's empty usage.
 */
function decideRun(
  start: RunStart,
  stepId: string,
  reads: AdmissionReads,
  userRate: GuardSnapshot['userRate'],
): DecidedRun {
  const { state, now, estimate, limits, firstStep, input, id, facts } = start;
  const { counted, reserved } = reads;
  const decision = evaluate('run_start', toSnapshot(state, facts, counted, reserved, reads.runCounts));
  const status: RunCreated['status'] = decision.outcome === 'ALLOW' ? 'RUNNING' : 'BLOCKED';
  let step: runs.NewStep | undefined;
  if (status === 'RUNNING' && firstStep) {
    const snapshot = toSnapshot(state, facts, counted, reserved, NOT_COUNTED);
    snapshot.modelPriced = start.modelPriced;
    snapshot.toolPolicy = toolPolicyInput(state, firstStep);
    snapshot.userRate = userRate;
    if (limits) addRunRuleInputs(snapshot, limits, FRESH_RUN, 0);
    const stepDecision = evaluate('step', snapshot);
    step = newStep(start.context, start.workspaceId, id, 1, firstStep, stepDecision, now, estimate, stepId);
  }
  const allowedFirst = step?.status === 'ALLOWED';
  const running = status === 'RUNNING' && limits !== null;
  const run: runs.NewRun = {
    id,
    workspaceId: start.workspaceId,
    userId: input.user_id,
    status,
    metadata: input.metadata ?? null,
    tags: input.tags ?? {},
    apiKeyId: input.apiKeyId ?? null,
    decision,
    now,
    day: start.scope.day,
    firstStep: step,
    // A run started for a single proxied call: this daemon ends it, or crash recovery does.
    daemonId: firstStep?.forwarded ? (start.context.instance?.id ?? null) : null,
    ...(running && {
      guard: {
        limits,
        allowedSteps: allowedFirst ? 1 : 0,
        lastCallHash: allowedFirst && firstStep ? loopHash(limits, firstStep) : null,
        identicalCalls: allowedFirst ? 1 : 0,
      },
    }),
  };
  const started: RunCreated = {
    id,
    user_id: input.user_id,
    status,
    decision: view(decision),
    ...(running && { limits: runLimitsView(limits) }),
    tags: input.tags ?? {},
  };
  return { run, step, started };
}

const answerOf = (decided: DecidedRun): RunBegun => ({
  run: decided.started,
  step: decided.step ? createdView(decided.step) : null,
});

/** What this daemon remembers of a run once it is written; the answer, observed. */
function afterStart(start: RunStart, decided: DecidedRun): RunBegun {
  const { context, workspaceId, input, limits } = start;
  const { started: run, step } = decided;
  // The steps that follow (a proxied call's, above all) need not read the run back.
  if (run.status === 'RUNNING')
    context.runFacts.remember(`${workspaceId}/${run.id}`, {
      userId: input.user_id,
      limits,
      tags: input.tags ?? {},
      apiKeyId: input.apiKeyId ?? null,
    });
  // Nor, after a proxied call's first step, its highest sequence. (Not told of every run: the
  // allocator would fill with runs that take no proxied step, and forget those that do.)
  if (step) {
    context.sequences.started(run.id, 1);
    rememberStep(context, step, input.user_id, callSubjects(step.apiKeyId, input.tags ?? {}));
  }
  context.observe('run_start', run.decision);
  const answer = answerOf(decided);
  if (answer.step) context.observe('step', answer.step.decision);
  return answer;
}
