/**
 * What the run API's use cases share in one daemon: the stores, the clock, and the caches, group
 * commits and in-process bookkeeping that keep the hot path short. One per GuardService, built
 * with it; each use case module takes it as its first argument, so none re-creates state.
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { Boundary, Decision } from '../rules/engine.js';
import type { CounterStore } from '../store/counters/counters.js';
import { isStatementRefusal, type Db } from '../store/db.js';
import { GroupCommit } from '../store/group-commit.js';
import * as runs from '../store/runs.js';
import { type FinishedStep, finishSteps, type StepFinish } from '../store/step-finish.js';
import { TableStatistics } from '../store/table-statistics.js';
import type { RunLimitValues } from '../store/workspaces.js';
import type { CountingShape } from './decision-inputs.js';
import { GuardStateCache } from './guard-state-cache.js';
import { PendingSpend } from './pending-spend.js';
import { PriceBook } from './price-book.js';
import { RecentMap } from './recent-map.js';
import { ReleasedRuns } from './released-runs.js';
import { SequenceAllocator } from './sequence-allocator.js';
import { WorkspaceQueue } from './workspace-queue.js';

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

/** A run as its steps' checks need it: its user and its limits (fixed at its start). */
export interface RunFacts {
  userId: string;
  limits: RunLimitValues | null;
  /** Its tags (`{}`: none): fixed at its start, as its user is. */
  tags: Record<string, string>;
  /** The API key that started it (null: a JWT's, or from before keys were kept): whose run it is. */
  apiKeyId: string | null;
}

/**
 * How long a proxied call's result may wait for others to share its statement. Its client already
 * has the answer, so nobody waits on it; what waits is the call's spend in later decisions.
 */
const RESULT_LINGER_MS = 10;

/**
 * How long the first of a batch of proxied calls' results waits at least, even alone. An agent's
 * next call often follows at once, and a result written immediately competes with that call's
 * read and insert; waiting a little lets the next call go first. The cost: the spend reaches
 * decisions up to this much later. (Measured in docs/performance.md, "What the code does for it".)
 */
const RESULT_DELAY_MS = 4;

export class GuardContext {
  /** Run (`workspace/run`) to its user and limits, for runs this daemon has seen. */
  readonly runFacts = new RecentMap<RunFacts>(10_000);
  readonly states = new GuardStateCache();
  /** Workspace to what its decisions count (time zone, budget windows), as its last decision here read it. */
  readonly shapes = new RecentMap<CountingShape>(10_000);
  /** Whose spend a MODEL_CALL step's result is (its user, key and tags), for the steps this daemon allowed. */
  readonly stepFacts = new RecentMap<{ userId: string; model: string | null; subjects: readonly string[] }>(10_000);
  /** Results released and not yet in the counters: every check of this daemon counts them. */
  readonly pending = new PendingSpend();
  readonly prices: PriceBook;
  /** Runs started for single proxied calls, answered and not yet written ended: they hold no slot here. */
  readonly releasedRuns = new ReleasedRuns();
  /** Workspace and model pairs already warned of as unpriced (once each, while remembered). */
  readonly warnedUnpriced = new RecentMap<true>(10_000);
  readonly sequences: SequenceAllocator;
  /** Reserve mode's checks of one workspace, one at a time in this daemon. */
  readonly reservationQueue = new WorkspaceQueue();
  /**
   * Results this daemon is writing, by run: a check of the run's budget waits for them, so a
   * proxied call's cost (its answer already released) counts in the run's next call.
   */
  readonly resultsInFlight = new Map<string, Set<Promise<unknown>>>();
  readonly stepInserts: GroupCommit<runs.NewStep, runs.StepInsertOutcome>;
  readonly stepFinishes: GroupCommit<StepFinish, FinishedStep | null>;
  readonly lingeringResults: GroupCommit<StepFinish, FinishedStep | null>;
  readonly runInserts: GroupCommit<runs.NewRun, undefined>;
  readonly runEnds: GroupCommit<runs.RunEnd, runs.EndedRun | null>;
  /** The steps and runs tables' statistics, taken again as this daemon's batches grow them. */
  private readonly stepStatistics: TableStatistics;
  private readonly runStatistics: TableStatistics;

  constructor(
    readonly db: Db,
    readonly counters: CounterStore,
    readonly clock: Clock,
    readonly log: Logger,
    readonly observer: GuardObserver | null,
    readonly instance: DaemonInstanceId | null,
  ) {
    this.sequences = new SequenceAllocator((runId) => runs.maxSequence(db, runId));
    this.prices = new PriceBook(db);
    const analyzeFailed = (error: unknown) => log.debug({ err: error }, 'ANALYZE failed');
    this.stepStatistics = new TableStatistics(db, 'steps', analyzeFailed);
    this.runStatistics = new TableStatistics(db, 'runs', analyzeFailed);
    const finish = (finishes: StepFinish[]) => finishSteps(db, finishes);
    this.stepInserts = new GroupCommit(
      async (steps) => {
        const outcomes = await runs.insertSteps(db, steps);
        this.stepStatistics.wrote(steps.length);
        return outcomes;
      },
      { retryAlone: isStatementRefusal },
    );
    this.stepFinishes = new GroupCommit(finish, { retryAlone: isStatementRefusal });
    this.lingeringResults = new GroupCommit(finish, {
      retryAlone: isStatementRefusal,
      minIntervalMs: RESULT_LINGER_MS,
      minDelayMs: RESULT_DELAY_MS,
    });
    this.runInserts = new GroupCommit(
      async (batch) => {
        await runs.insertRuns(db, batch);
        this.runStatistics.wrote(batch.length);
        // A proxied call without a run writes its run and its step in this statement.
        this.stepStatistics.wrote(batch.filter((run) => run.firstStep).length);
        return batch.map(() => undefined);
      },
      { retryAlone: isStatementRefusal },
    );
    this.runEnds = new GroupCommit((ends) => runs.endRuns(db, ends), { retryAlone: isStatementRefusal });
  }

  /** An observer failing must never fail the request it observes. */
  observe(boundary: Boundary, decision: Decision): void {
    try {
      this.observer?.decision(boundary, decision);
    } catch (error) {
      this.log.warn({ err: error }, 'guard observer failed');
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
    await Promise.all([this.stepStatistics.settled(), this.runStatistics.settled()]);
  }
}
