/**
 * The use cases of the run API, each reading top to bottom as: load state, decide (pure rules),
 * record, update the hot counters, answer. Data flows one way; the HTTP layer only maps.
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import { ApiError } from '../errors.js';
import { evaluate, type Decision, type GuardSnapshot } from '../rules/engine.js';
import { isStatementRefusal, type Db, type Queryable } from '../store/db.js';
import { GroupCommit } from '../store/group-commit.js';
import {
  lockAdmissions,
  runCounts,
  scopeAt,
  SPEND_CAP_MICROS,
  type CounterScope,
  type CounterStore,
  type DailySpend,
  type RunCounts,
} from '../store/counters.js';
import { findAnswer, saveAnswer, type IdempotencyClaim } from '../store/idempotency.js';
import * as runs from '../store/runs.js';
import { timeOrderedId } from '../store/time-ordered-id.js';
import { loadGuardState, loadStepGuardState, type GuardState } from '../store/workspaces.js';
import { GuardStateCache } from './guard-state-cache.js';
import { callCost, costToMicros, isPriced } from '../money/cost.js';
import { estimateCallMicros } from '../money/call-estimate.js';
import { usdToMicros } from '../money/decimal.js';
import {
  lockReservations,
  NO_RESERVATIONS,
  outstandingReservations,
  spendAndReservations,
  type Reserved,
} from '../store/reservations.js';
import { PendingSpend } from './pending-spend.js';
import { PriceBook } from './price-book.js';
import { ReleasedRuns } from './released-runs.js';
import { SequenceAllocator } from './sequence-allocator.js';
import { WorkspaceQueue } from './workspace-queue.js';
import {
  FRESH_RUN,
  guarded,
  loopHash,
  resolveRunLimits,
  runLimitsView,
  runReserve,
  runRuleInputs,
  userRateInput,
} from './run-limits.js';
import { decidedBeforeRecorded, type Decided } from './decided.js';
import { NOT_COUNTED, readsReservations, reservesAgainstBudget, reserveTerms, toSnapshot } from './guard-snapshot.js';
import {
  createdView,
  view,
  type CreatedStep,
  type DecisionView,
  type EndedRunView,
  type FinishedStepView,
  type StartedRun,
} from './guard-views.js';
import { RecentMap } from './recent-map.js';
import type { StepInput } from './step-input.js';
import type { StepSlot } from '../store/step-rate.js';
import type { RunLimitsRequest } from '../contract/runs.js';
import type { RunLimitValues } from '../store/workspaces.js';

export type Boundary = 'run_start' | 'step';

/**
 * Told about what the service decides, after the decision's record committed (an idempotent
 * replay is not a new decision). Metrics implement it; the service imports no metrics library.
 */
export interface GuardObserver {
  decision(boundary: Boundary, decision: Pick<Decision, 'outcome' | 'reason'>): void;
  /** A model call's result had tokens and its model no active price: it counts $0. */
  unpricedCall?(): void;
}

/** This daemon process's id among the daemons on its database (null: not registered, nothing owned). */
export interface DaemonInstanceId {
  readonly id: number | null;
}

/** What a start takes: the run API's body. */
export interface RunStartInput {
  user_id: string;
  metadata?: unknown;
  limits?: RunLimitsRequest;
}

/** A run as its steps' checks need it: its user and its limits (fixed at its start). */
interface RunFacts {
  userId: string;
  limits: RunLimitValues | null;
}

/** A step check that takes the runaway rules' transaction: a run with limits, or a user rate. */
interface GuardedStep {
  workspaceId: string;
  runId: string;
  userId: string;
  id: string;
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

/**
 * How long a proxied call's result may wait for others to share its statement. Its client already
 * has the answer, so nobody waits on it; what waits is the call's spend in later decisions.
 */
const RESULT_LINGER_MS = 10;

/**
 * How long the first of a batch of proxied calls' results waits at least, even alone. An agent's
 * next call often follows at once: written immediately, the result's statement and spend raise
 * ran alongside that call's read and insert, and added ~1 ms to it (p50, one connection, in the
 * bench). 4 ms covers that check's p90 here. The spend reaches decisions up to 4 ms later than it
 * did; the very next call's read usually came before the raise already.
 */
const RESULT_DELAY_MS = 4;

/** Reads of the counters before a cost that reached them meanwhile is counted anyway (twice, toward denying). */
const PENDING_READ_ATTEMPTS = 3;

/** Tries at taking an allocated sequence before giving up (each collision resyncs first). */
const SEQUENCE_ATTEMPTS = 10;

/** A concurrent twin of an idempotent request committed first. */
class IdempotencyRace extends Error {}

/** Another step of the run holds the sequence. */
class SequenceTaken extends Error {}

export class GuardService {
  /** Run (`workspace/run`) to its user and limits, for runs this daemon has seen. */
  private readonly runFacts = new RecentMap<RunFacts>(10_000);
  private readonly states = new GuardStateCache();
  /** Whose spend a MODEL_CALL step's result is, for the steps this daemon allowed. */
  private readonly stepFacts = new RecentMap<{ userId: string; model: string }>(10_000);
  /** Results released and not yet in the counters: every check of this daemon counts them. */
  private readonly pending = new PendingSpend();
  readonly prices: PriceBook;
  /** Runs of proxied calls' own, answered and not yet written ended: they hold no slot here. */
  private readonly releasedRuns = new ReleasedRuns();
  /** Workspace and model pairs already warned of as unpriced (once each, while remembered). */
  private readonly warnedUnpriced = new RecentMap<true>(10_000);
  private readonly sequences: SequenceAllocator;
  /** Reserve mode's checks of one workspace, one at a time in this daemon. */
  private readonly reservationQueue = new WorkspaceQueue();
  /**
   * Results this daemon is writing, by run: a check of the run's budget waits for them, so a
   * proxied call's cost (its answer already released) counts in the run's next call.
   */
  private readonly resultsInFlight = new Map<string, Set<Promise<unknown>>>();
  private readonly stepInserts: GroupCommit<runs.NewStep, runs.StepInsertOutcome>;
  private readonly stepFinishes: GroupCommit<runs.StepFinish, runs.FinishedStep | null>;
  private readonly lingeringResults: GroupCommit<runs.StepFinish, runs.FinishedStep | null>;
  private readonly runInserts: GroupCommit<runs.NewRun, undefined>;
  private readonly runEnds: GroupCommit<runs.RunEnd, runs.EndedRun | null>;

  constructor(
    private readonly db: Db,
    private readonly counters: CounterStore,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly observer: GuardObserver | null = null,
    private readonly instance: DaemonInstanceId | null = null,
  ) {
    this.sequences = new SequenceAllocator((runId) => runs.maxSequence(db, runId));
    this.prices = new PriceBook(db);
    const finish = (finishes: runs.StepFinish[]) => runs.finishSteps(db, finishes);
    this.stepInserts = new GroupCommit((steps) => runs.insertSteps(db, steps), { retryAlone: isStatementRefusal });
    this.stepFinishes = new GroupCommit(finish, { retryAlone: isStatementRefusal });
    this.lingeringResults = new GroupCommit(finish, {
      retryAlone: isStatementRefusal,
      minIntervalMs: RESULT_LINGER_MS,
      minDelayMs: RESULT_DELAY_MS,
    });
    this.runInserts = new GroupCommit(
      async (batch) => {
        await runs.insertRuns(db, batch);
        return batch.map(() => undefined);
      },
      { retryAlone: isStatementRefusal },
    );
    this.runEnds = new GroupCommit((ends) => runs.endRuns(db, ends), { retryAlone: isStatementRefusal });
  }

  /** An observer failing must never fail the request it observes. */
  private observe(boundary: Boundary, decision: DecisionView): void {
    try {
      this.observer?.decision(boundary, decision);
    } catch (error) {
      this.log.warn({ err: error }, 'guard observer failed');
    }
  }

  async startRun(workspaceId: string, input: RunStartInput, idempotency?: IdempotencyClaim): Promise<StartedRun> {
    const replay = idempotency ? await this.replay<StartedRun>(idempotency) : null;
    if (replay) return replay;
    try {
      return (await this.start(workspaceId, input, idempotency, null)).run;
    } catch (error) {
      if (error instanceof IdempotencyRace) return (await this.replay<StartedRun>(idempotency))!;
      throw error;
    }
  }

  /**
   * A run of a proxied call's own, started with that call's step: one read of the decision's
   * inputs and one commit for both. The step is checked against the start's inputs (its rules are
   * the first four of the start's). No step when the start is BLOCKED. Answers once decided, the
   * commit under way (see `Decided`); in a workspace with a run limit, the decision holds only
   * under the admission lock until its commit, so there it answers once the record is durable.
   */
  async decideRunWithStep(
    workspaceId: string,
    input: RunStartInput,
    firstStep: Omit<StepInput, 'sequence'>,
  ): Promise<Decided<{ run: StartedRun; step: CreatedStep | null }>> {
    return decidedBeforeRecorded((whenDecided) => this.start(workspaceId, input, undefined, firstStep, whenDecided));
  }

  private async start(
    workspaceId: string,
    input: RunStartInput,
    idempotency: IdempotencyClaim | undefined,
    firstStep: Omit<StepInput, 'sequence'> | null,
    whenDecided?: (decided: { run: StartedRun; step: CreatedStep | null }) => void,
  ): Promise<{ run: StartedRun; step: CreatedStep | null }> {
    const now = this.clock.now();
    const scope = scopeAt(now, workspaceId, input.user_id);
    const [state, spend] = await this.decisionInputs(scope);
    const modelPriced = firstStep ? await this.modelPriced(state, workspaceId, firstStep) : undefined;
    const estimate = firstStep ? await this.stepEstimate(state, workspaceId, firstStep) : null;
    const limits = resolveRunLimits(state.workspace, input.limits);
    const rate = firstStep ? state.workspace.user_steps_per_minute : null;
    // Rules 5 and 6 count runs only where the workspace has a run limit: then under its admission
    // lock, so the counts are exact and stay so until this start commits. Without one, no rule
    // reads them, and starts do not queue behind each other.
    const limited = state.workspace.monthly_run_limit !== null || state.workspace.max_concurrent_runs !== null;
    // One statement commits on its own, in a batch with the starts under way; a lock, a
    // remembered answer or a place in a user's window of steps needs a transaction of its own.
    // Reserve mode: a first step that reserves is checked and written under the workspace's
    // reservation lock (taken after the admission lock), as createStep's.
    const reserving = reservesAgainstBudget(state, estimate);
    const batched = !limited && !idempotency && !reserving && rate === null;
    const slot: { taken: StepSlot | null } = { taken: null };
    const admit = async (db: Queryable) => {
      await slot.taken?.release();
      slot.taken = null;
      let counts = NOT_COUNTED;
      if (limited) {
        await lockAdmissions(db, workspaceId);
        counts = await this.runCountsLessReleased(db, scope);
      }
      const { counted, reserved } = await this.budgetCounts(db, scope, spend, reserving, readsReservations(state));
      // A run of a proxied call's own is judged with its call's estimate: denied, it is BLOCKED.
      const decision = evaluate('run_start', {
        ...toSnapshot(state, { ...counted, ...counts }, now),
        ...reserveTerms(state, reserved, estimate),
      });
      const status: StartedRun['status'] = decision.outcome === 'ALLOW' ? 'RUNNING' : 'BLOCKED';
      const id = timeOrderedId(now.getTime());
      const hash = firstStep ? loopHash(limits, firstStep) : null;
      let step: runs.NewStep | undefined;
      if (status === 'RUNNING' && firstStep) {
        // A fresh run: the runaway rules read its empty usage.
        const stepSnapshot: GuardSnapshot = {
          ...toSnapshot(state, { ...counted, ...NOT_COUNTED }, now),
          ...reserveTerms(state, reserved, estimate),
          modelPriced,
          ...(limits && runRuleInputs(limits, FRESH_RUN, 0, runReserve(state.workspace, estimate))),
        };
        let stepDecision = evaluate('step', stepSnapshot);
        const stepId = timeOrderedId(now.getTime());
        if (stepDecision.outcome === 'ALLOW' && rate !== null) {
          slot.taken = await this.counters.takeStepSlot(db, scope, { limit: rate, nowMs: now.getTime(), stepId });
          stepDecision = evaluate('step', {
            ...stepSnapshot,
            userRate: userRateInput(slot.taken, rate, now.getTime()),
          });
        }
        step = this.newStep(workspaceId, id, 1, firstStep, stepDecision, now, estimate, stepId);
      }
      const allowedFirst = step?.status === 'ALLOWED';
      const run: runs.NewRun = {
        id,
        workspaceId,
        userId: input.user_id,
        status,
        metadata: input.metadata ?? null,
        decision,
        now,
        day: scope.day,
        firstStep: step,
        // A run of a proxied call's own: this daemon ends it, or crash recovery does.
        daemonId: firstStep?.forwarded ? (this.instance?.id ?? null) : null,
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
      const started: StartedRun = {
        id,
        user_id: input.user_id,
        status,
        decision: view(decision),
        ...(limits && status === 'RUNNING' && { limits: runLimitsView(limits) }),
      };
      if (batched) {
        const committing = this.runInserts.submit(run);
        whenDecided?.({ run: started, step: step ? createdView(step) : null });
        await committing;
      } else {
        await runs.insertRuns(db, [run]);
      }
      await this.remember(db, idempotency, started, now);
      return { run: started, step };
    };
    let admitted: Awaited<ReturnType<typeof admit>>;
    try {
      admitted = batched
        ? await admit(this.db)
        : await this.inReservationQueue(reserving, workspaceId, () => this.db.transaction(admit));
    } catch (error) {
      await slot.taken?.release();
      throw error;
    }
    const { run, step } = admitted;
    // The steps that follow (a proxied call's, above all) need not read the run back.
    if (run.status === 'RUNNING') this.runFacts.remember(`${workspaceId}/${run.id}`, { userId: input.user_id, limits });
    // Nor, after a proxied call's first step, its highest sequence. (Not told of every run: the
    // allocator would fill with runs that take no proxied step, and forget those that do.)
    if (step) {
      this.sequences.started(run.id, 1);
      this.rememberStep(step, input.user_id);
    }
    this.observe('run_start', run.decision);
    if (!step) return { run, step: null };
    const created = createdView(step);
    this.observe('step', created.decision);
    return { run, step: created };
  }

  /**
   * Allowed runs this month, and RUNNING runs less those whose call this daemon has answered (their
   * end is on its way). A released run ended during the count may be in it or not: count again.
   */
  private async runCountsLessReleased(db: Queryable, scope: CounterScope): Promise<RunCounts> {
    for (let attempt = 1; ; attempt++) {
      const released = this.releasedRuns.held(scope.workspaceId);
      const counts = await runCounts(db, scope);
      if (released.count === 0) return counts;
      if (released.overtaken() && attempt < PENDING_READ_ATTEMPTS) continue;
      // Counted anyway after a few tries: an overtaken run then counts as running (toward denying).
      const freed = released.overtaken() ? 0 : released.count;
      return { ...counts, concurrentRuns: Math.max(0, counts.concurrentRuns - freed) };
    }
  }

  /**
   * A run of a proxied call's own has answered its call: from now it holds no concurrency slot
   * in this daemon's admissions, until its end (which follows) is written.
   */
  runAnswered(workspaceId: string, runId: string): void {
    this.releasedRuns.release(workspaceId, runId);
  }

  /** A MODEL_CALL step allowed here: its result's cost will be held as pending spend. */
  private rememberStep(step: runs.NewStep, userId: string): void {
    if (step.status === 'ALLOWED' && step.model !== null)
      this.stepFacts.remember(step.id, { userId, model: step.model });
  }

  private newStep(
    workspaceId: string,
    runId: string,
    sequence: number,
    input: Omit<StepInput, 'sequence'>,
    decision: Decision,
    now: Date,
    estimateMicros: number | null,
    id = timeOrderedId(now.getTime()),
  ): runs.NewStep {
    return {
      id,
      runId,
      workspaceId,
      sequence,
      type: input.type,
      status: decision.outcome === 'ALLOW' ? 'ALLOWED' : 'BLOCKED',
      model: input.model ?? null,
      toolName: input.tool_name ?? null,
      inputData: input.input_data ?? null,
      decision,
      now,
      estimateMicros,
      daemonId: input.forwarded && decision.outcome === 'ALLOW' ? (this.instance?.id ?? null) : null,
    };
  }

  async endRun(
    workspaceId: string,
    runId: string,
    status: 'COMPLETED' | 'FAILED',
    idempotency?: IdempotencyClaim,
  ): Promise<EndedRunView> {
    const replay = idempotency ? await this.replay<EndedRunView>(idempotency) : null;
    if (replay) return replay;
    const now = this.clock.now();
    const end = async (db: Queryable): Promise<EndedRunView> => {
      const request = { workspaceId, runId, status, now };
      const ended = await (
        idempotency ? runs.endRuns(db, [request]).then((all) => all[0]) : this.runEnds.submit(request)
      ).finally(() => this.releasedRuns.ended(workspaceId, runId));
      if (!ended) {
        if (await runs.runExists(db, workspaceId, runId)) throw new ApiError('RUN_NOT_RUNNING');
        throw new ApiError('RUN_NOT_FOUND');
      }
      const answer: EndedRunView = { id: ended.id, status: ended.status, ended_at: ended.ended_at.toISOString() };
      await this.remember(db, idempotency, answer, now);
      // An ended run takes no more steps: what was kept for them goes (a step that still comes
      // reads the run, and is told it no longer runs).
      this.sequences.ended(runId);
      this.runFacts.forget(`${workspaceId}/${runId}`);
      return answer;
    };
    // One statement commits on its own, in a batch with the ends under way; a remembered answer
    // must commit with it, in a transaction of its own.
    return this.replayOnConflict(idempotency, () => (idempotency ? this.db.transaction(end) : end(this.db)));
  }

  /**
   * A step of a call forwarded while its record commits (the proxy): createStep with a sequence
   * of the server's, answering once decided, the insert under way (see `Decided`).
   */
  async decideStep(
    workspaceId: string,
    runId: string,
    input: Omit<StepInput, 'sequence'>,
  ): Promise<Decided<CreatedStep>> {
    return decidedBeforeRecorded((whenDecided) =>
      this.createStep(workspaceId, runId, { ...input, sequence: null }, undefined, whenDecided),
    );
  }

  async createStep(
    workspaceId: string,
    runId: string,
    input: StepInput,
    idempotency?: IdempotencyClaim,
    /** Told once the step is decided and its insert submitted (`decideStep`). */
    whenDecided?: (decided: CreatedStep) => void,
  ): Promise<CreatedStep> {
    const replay = idempotency ? await this.replay<CreatedStep>(idempotency) : null;
    if (replay) return replay;
    const now = this.clock.now();
    const [state, spend, run] = await this.stepCheckInputs(workspaceId, runId, now);
    const modelPriced = await this.modelPriced(state, workspaceId, input);
    const estimate = await this.stepEstimate(state, workspaceId, input);
    const scope = scopeAt(now, workspaceId, run.userId);
    const decide = (counted: DailySpend, reserved: Reserved, runaway: Partial<GuardSnapshot> = {}) =>
      evaluate('step', {
        ...toSnapshot(state, { ...counted, ...NOT_COUNTED }, now),
        ...reserveTerms(state, reserved, estimate),
        modelPriced,
        ...runaway,
      });
    // Reserve mode: a step that reserves is checked and written under its workspace's
    // reservation lock, so racing checks (in any daemon) each count the others' reservations.
    // One that reserves nothing adds no cost: it reads the reservations, unlocked.
    const reserving = reservesAgainstBudget(state, estimate);
    const id = timeOrderedId(now.getTime());
    const step = (decision: Decision, sequence: number) =>
      this.newStep(workspaceId, runId, sequence, input, decision, now, estimate, id);
    // Writes the step with `sequence`; answers the step written. A run with limits, or a user
    // rate, decides in the step's transaction (writeGuardedStep).
    const runaway = guarded(state.workspace, run.limits);
    const unlockedDecision =
      reserving || runaway
        ? null
        : decide(spend, readsReservations(state) ? await this.reserved(this.db, scope) : NO_RESERVATIONS);
    // The run's budget reads its recorded cost: results of this run still on their way count.
    if (run.limits?.maxCostMicros != null) await this.resultsWritten(runId);
    const insert = async (sequence: number): Promise<runs.NewStep> => {
      if (runaway)
        return this.inReservationQueue(reserving, workspaceId, () =>
          this.writeGuardedStep(
            {
              workspaceId,
              runId,
              userId: run.userId,
              id,
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
          ? await this.inReservationQueue(reserving, workspaceId, () =>
              this.db.transaction(async (tx) => {
                const decision = unlockedDecision ?? (await this.decideReserving(tx, scope, decide));
                const candidate = step(decision, sequence);
                const [inserted] = await runs.insertSteps(tx, [candidate]);
                if (inserted === 'inserted') await this.remember(tx, idempotency, createdView(candidate), now);
                return [candidate, inserted!] as const;
              }),
            )
          : await (async () => {
              const candidate = step(unlockedDecision!, sequence);
              const inserting = this.stepInserts.submit(candidate);
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
      const written = given === null ? await this.withAllocatedSequence(runId, insert) : await insert(given);
      if (given !== null) await this.sequences.observe(runId, given);
      this.rememberStep(written, run.userId);
      const recorded = createdView(written);
      this.observe('step', recorded.decision);
      return recorded;
    } catch (error) {
      // A concurrent twin of an idempotent request took the sequence first: answer as it did.
      const twin =
        error instanceof IdempotencyRace || error instanceof SequenceTaken
          ? await this.replay<CreatedStep>(idempotency)
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
  private async writeGuardedStep(
    check: GuardedStep,
    sequence: number,
    idempotency: IdempotencyClaim | undefined,
  ): Promise<runs.NewStep> {
    const { workspaceId, runId, limits, now } = check;
    const rate = check.userStepsPerMinute;
    const scope = scopeAt(now, workspaceId, check.userId);
    const slot: { taken: StepSlot | null } = { taken: null };
    try {
      return await this.db.transaction(async (tx) => {
        // A transaction run again (a deadlock victim) takes its place again.
        await slot.taken?.release();
        slot.taken = null;
        // The run's lock first, then the workspace's reservation lock: a run with limits takes
        // both in this order everywhere, and a step that takes only the latter locks no such run.
        const reservations = check.reserve !== null && limits?.maxCostMicros != null;
        const usage = limits ? await runs.lockRunUsage(tx, workspaceId, runId, { reservations }) : null;
        if (limits && !usage) throw new ApiError('RUN_NOT_FOUND');
        if (usage && usage.status !== 'RUNNING') throw new ApiError('RUN_NOT_RUNNING');
        const { counted, reserved } = await this.budgetCounts(
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
          slot.taken = await this.counters.takeStepSlot(tx, scope, {
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
        await this.remember(tx, idempotency, createdView(step), now);
        return step;
      });
    } catch (error) {
      await slot.taken?.release();
      throw error;
    }
  }

  async finishStep(
    workspaceId: string,
    runId: string,
    stepId: string,
    result: runs.StepResult,
    idempotency?: IdempotencyClaim,
  ): Promise<FinishedStepView> {
    const replay = idempotency ? await this.replay<FinishedStepView>(idempotency) : null;
    if (replay) return replay;
    const now = this.clock.now();
    const finish: runs.StepFinish = { workspaceId, runId, stepId, result, now, day: scopeAt(now, workspaceId, '').day };
    const release = this.holdSpend(finish);
    const written = this.replayOnConflict(idempotency, async () => {
      // A remembered answer commits with the result, in a transaction of its own; any other
      // result shares its statement and commit with the results written at the same moment.
      const finished = idempotency
        ? await this.db.transaction(async (tx) => {
            const [step] = await runs.finishSteps(tx, [finish]);
            if (step) await this.remember(tx, idempotency, { id: step.id, status: step.status }, now);
            return step ?? null;
          })
        : await this.stepFinishes.submit(finish);
      return this.afterFinish(finish, finished);
    }).finally(release);
    return this.inFlight(runId, written);
  }

  /**
   * The result of a step whose caller is not waiting for this answer (a proxied call, already
   * answered): it shares a statement with the results of the next few milliseconds.
   */
  async recordResult(
    workspaceId: string,
    runId: string,
    stepId: string,
    result: runs.StepResult,
  ): Promise<FinishedStepView> {
    const now = this.clock.now();
    const finish: runs.StepFinish = { workspaceId, runId, stepId, result, now, day: scopeAt(now, workspaceId, '').day };
    const release = this.holdSpend(finish);
    const written = this.lingeringResults
      .submit(finish)
      .then((finished) => this.afterFinish(finish, finished))
      .finally(release);
    return this.inFlight(runId, written);
  }

  /** Keeps `result` among the run's results in flight until it settles. */
  private inFlight<T>(runId: string, result: Promise<T>): Promise<T> {
    let results = this.resultsInFlight.get(runId);
    if (!results) this.resultsInFlight.set(runId, (results = new Set()));
    results.add(result);
    const forget = () => {
      results.delete(result);
      if (results.size === 0 && this.resultsInFlight.get(runId) === results) this.resultsInFlight.delete(runId);
    };
    result.then(forget, forget);
    return result;
  }

  /** Resolves once the run's results this daemon is writing now are written (or failed). */
  private async resultsWritten(runId: string): Promise<void> {
    const results = this.resultsInFlight.get(runId);
    if (results) await Promise.allSettled([...results]);
  }

  /** Unpriced spend is invisible to budgets: say so (a metric per call, a warning per model and workspace). */
  private unpricedCall(workspaceId: string, model: string): void {
    try {
      this.observer?.unpricedCall?.();
    } catch (error) {
      this.log.warn({ err: error }, 'guard observer failed');
    }
    const key = `${workspaceId}\u0000${model}`;
    if (this.warnedUnpriced.get(key)) return;
    this.warnedUnpriced.remember(key, true);
    this.log.warn(
      { workspaceId, model },
      'a model call was recorded without a price: its cost counts $0 against every budget (set a price, or unpriced_models "deny")',
    );
  }

  /**
   * With `unpriced_models: "deny"`, whether a MODEL_CALL step's model has an active price (the
   * rule model_priced); undefined where the rule is not evaluated.
   */
  private async modelPriced(
    state: GuardState,
    workspaceId: string,
    input: Omit<StepInput, 'sequence'>,
  ): Promise<GuardSnapshot['modelPriced']> {
    if (input.type !== 'MODEL_CALL' || state.workspace.unpriced_models !== 'deny') return undefined;
    const model = input.model ?? null;
    return { model, priced: model !== null && (await this.prices.prices(workspaceId, model)) !== null };
  }

  /**
   * The upper bound of a step's cost, in microdollars, stored with the step: the caller's own
   * (`max_cost_usd`), or a proxied model call's, estimated from its request and its model's active
   * prices (none for an unpriced model: its cost is unknown). Null: no bound is known.
   */
  private async stepEstimate(
    state: GuardState,
    workspaceId: string,
    input: Omit<StepInput, 'sequence'>,
  ): Promise<number | null> {
    if (input.max_cost_usd !== undefined && input.max_cost_usd !== null) return usdToMicros(input.max_cost_usd);
    if (input.type !== 'MODEL_CALL') return null;
    const model = input.model ?? null;
    if (input.bounds) {
      if (model === null) return null;
      const prices = await this.prices.prices(workspaceId, model);
      return prices ? estimateCallMicros(input.bounds, model, prices, SPEND_CAP_MICROS) : null;
    }
    // An API step says nothing of its size: in reserve mode it reserves the workspace's default.
    return state.workspace.budget_mode === 'reserve' ? state.workspace.default_step_reservation_micros : null;
  }

  /**
   * Reserve mode: the decision of a step that reserves, made under the workspace's reservation
   * lock (held until `tx` commits with the step) from the records' spend and outstanding
   * reservations. This daemon's pending spend is not added: a result not written yet is a step
   * still ALLOWED, whose estimate is counted as a reservation. Nothing here may wait for another
   * pool connection (a price read would): the checks queued behind the lock hold them all.
   */
  private async decideReserving(
    tx: Queryable,
    scope: CounterScope,
    decide: (spend: DailySpend, reserved: Reserved) => Decision,
  ): Promise<Decision> {
    const { counted, reserved } = await this.budgetCounts(tx, scope, null, true, true);
    return decide(counted, reserved);
  }

  /**
   * What the budget rules count. A step that reserves: the records' spend and outstanding
   * reservations, read under the workspace's reservation lock (held until `db`, a transaction,
   * commits), and on `db` alone, as no other pool connection may be waited for there. Otherwise
   * the spend read before, and the reservations where the rules count them.
   */
  private async budgetCounts(
    db: Queryable,
    scope: CounterScope,
    spend: DailySpend | null,
    reserving: boolean,
    countsReservations: boolean,
  ): Promise<{ counted: DailySpend; reserved: Reserved }> {
    if (reserving || spend === null) {
      await lockReservations(db, scope.workspaceId);
      const read = await spendAndReservations(db, scope);
      return { counted: read, reserved: read };
    }
    return { counted: spend, reserved: countsReservations ? await this.reserved(db, scope) : NO_RESERVATIONS };
  }

  /** Runs `task` in the workspace's turn when it reserves (see WorkspaceQueue), else at once. */
  private inReservationQueue<T>(reserving: boolean, workspaceId: string, task: () => Promise<T>): Promise<T> {
    return reserving ? this.reservationQueue.run(workspaceId, task) : task();
  }

  /** The outstanding reservations of the scope's workspace and user. */
  private reserved(db: Queryable, scope: CounterScope): Promise<Reserved> {
    return outstandingReservations(db, scope.workspaceId, scope.userId);
  }

  /**
   * Holds a result's cost as pending spend from now (its answer is released) until its record
   * and the counters hold it; answers the function that stops holding it. Priced as the record
   * will be, from the model's active prices.
   */
  private holdSpend(finish: runs.StepFinish): () => void {
    const facts = this.stepFacts.get(finish.stepId);
    const { result } = finish;
    const tokens = {
      promptTokens: result.promptTokens,
      completionTokens: result.completionTokens,
      cacheReadTokens: result.cacheReadTokens ?? null,
      cacheWriteTokens: result.cacheWriteTokens ?? null,
    };
    if (!facts || !isPriced(tokens)) return () => {};
    const cost = this.prices.prices(finish.workspaceId, facts.model).then((prices) => {
      // Priced as the record will be (src/money/cost.ts is the one definition), capped as the counters are.
      if (prices) return Math.min(Number(costToMicros(callCost(tokens, prices)!)), SPEND_CAP_MICROS);
      this.unpricedCall(finish.workspaceId, facts.model);
      return 0;
    });
    return this.pending.add(scopeAt(finish.now, finish.workspaceId, facts.userId), cost);
  }

  /** A result's statement answered: why nothing was finished, or the spend copy raised and the answer. */
  private async afterFinish(finish: runs.StepFinish, finished: runs.FinishedStep | null): Promise<FinishedStepView> {
    if (!finished) {
      if (await runs.stepExists(this.db, finish.workspaceId, finish.runId, finish.stepId))
        throw new ApiError('STEP_ALREADY_FINISHED');
      throw new ApiError('STEP_NOT_FOUND');
    }
    this.stepFacts.forget(finish.stepId);
    if (finished.totals)
      await this.counters.spendRecorded(scopeAt(finish.now, finish.workspaceId, finished.user_id), finished.totals);
    return { id: finished.id, status: finished.status };
  }

  /**
   * What a step check reads: the rules' state and the day's spend. A run's workspace and user
   * never change: once this daemon has seen the run, both are read at once, and whether it still
   * runs is left to the step's insert.
   */
  private async stepCheckInputs(
    workspaceId: string,
    runId: string,
    now: Date,
  ): Promise<[GuardState, DailySpend, RunFacts]> {
    const runKey = `${workspaceId}/${runId}`;
    const known = this.runFacts.get(runKey);
    if (known !== undefined) return [...(await this.decisionInputs(scopeAt(now, workspaceId, known.userId))), known];
    const found = await loadStepGuardState(this.db, workspaceId, runId);
    if (!found) throw new ApiError('RUN_NOT_FOUND');
    if (found.runStatus !== 'RUNNING') throw new ApiError('RUN_NOT_RUNNING');
    const facts: RunFacts = { userId: found.userId, limits: found.runLimits };
    this.runFacts.remember(runKey, facts);
    const scope = scopeAt(now, workspaceId, found.userId);
    const { spend } = await this.withPendingSpend(scope, async () => ({ spend: await this.counters.readSpend(scope) }));
    return [found, spend, facts];
  }

  /**
   * What a decision reads: the day's spend and the workspace's state version in one read of the
   * counters, then the rules' state of the workspace and user, remembered while that version holds.
   */
  private async decisionInputs(scope: CounterScope): Promise<[GuardState, DailySpend]> {
    const { spend, stateVersion } = await this.withPendingSpend(scope, () => this.counters.readDecisionInputs(scope));
    let state = this.states.get(scope.workspaceId, scope.userId, stateVersion);
    if (!state) {
      state = await loadGuardState(this.db, scope.workspaceId, scope.userId);
      this.states.set(scope.workspaceId, scope.userId, stateVersion, state);
    }
    return [state, spend];
  }

  /**
   * Reads the counters with `read`, and adds the spend this daemon released and has not written
   * yet. A held cost that reached the counters during the read may be in it or not: read again.
   */
  private async withPendingSpend<T extends { spend: DailySpend }>(
    scope: CounterScope,
    read: () => Promise<T>,
  ): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const held = this.pending.held(scope);
      const got = await read();
      if (held.overtaken() && attempt < PENDING_READ_ATTEMPTS) continue;
      return { ...got, spend: await held.addTo(got.spend) };
    }
  }

  /** Resolves once every step and result submitted so far is written (before the stores close). */
  async settled(): Promise<void> {
    await Promise.all([
      this.runInserts.settled(),
      this.stepInserts.settled(),
      this.stepFinishes.settled(),
      this.lingeringResults.settled(),
      this.runEnds.settled(),
    ]);
  }

  /** Inserts with the run's next sequence; when another writer took that number, with the next. */
  private async withAllocatedSequence<T>(runId: string, insert: (sequence: number) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const sequence = this.sequences.next(runId) ?? (await this.sequences.allocate(runId));
      try {
        return await insert(sequence);
      } catch (error) {
        if (!(error instanceof SequenceTaken) || attempt >= SEQUENCE_ATTEMPTS) throw error;
        await this.sequences.resync(runId);
      }
    }
  }

  /**
   * Runs a state change whose answer is remembered in its own transaction. When it conflicts
   * (409) and the request carries a key, a twin of it may have done the work first, or the first
   * attempt committed before its answer was lost: answer as that one did.
   */
  private async replayOnConflict<T>(claim: IdempotencyClaim | undefined, change: () => Promise<T>): Promise<T> {
    if (!claim) return change();
    try {
      return await change();
    } catch (error) {
      const conflict = error instanceof IdempotencyRace || (error instanceof ApiError && error.statusCode === 409);
      const twin = conflict ? await this.replay<T>(claim) : null;
      if (twin) return twin;
      throw error;
    }
  }

  private async replay<T>(claim: IdempotencyClaim | undefined): Promise<T | null> {
    if (!claim) return null;
    const stored = await findAnswer(this.db, claim.workspaceId, claim.key, this.clock.now());
    if (!stored) return null;
    if (stored.fingerprint !== claim.fingerprint) throw new ApiError('IDEMPOTENCY_KEY_REUSED');
    return stored.body as T;
  }

  private async remember(tx: Queryable, claim: IdempotencyClaim | undefined, answer: unknown, now: Date) {
    if (claim && !(await saveAnswer(tx, claim, answer, now))) throw new IdempotencyRace();
  }
}
