/**
 * The use cases of the run API, each reading top to bottom as: load state, decide (pure rules),
 * record, update the hot counters, answer. Data flows one way; the HTTP layer only maps.
 *
 * This class is the one entry point the routes and the proxy call: each use case lives in a module of
 * its own (run-start, run-end, step-creation, step-results) and takes the state they share in
 * this daemon, one GuardContext, built here.
 */
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import type { CounterStore } from '../store/counters/counters.js';
import type { Db } from '../store/db.js';
import type { IdempotencyClaim } from '../store/idempotency.js';
import type { StepResult } from '../store/step-finish.js';
import type { Decided } from './decided.js';
import { GuardContext, type DaemonInstanceId, type GuardObserver } from './guard-context.js';
import type { RunCreated, RunEnded, StepCreated, StepUpdated } from '../contract/runs.js';
import type { PriceBook } from './price-book.js';
import { endRun } from './run-end.js';
import { startedByKey } from './run-owner.js';
import { beginRun, startRun, type RunBegun, type RunStartInput } from './run-start.js';
import { admitStep, createStep } from './step-creation.js';
import type { StepInput } from './step-input.js';
import { finishStep, recordResult } from './step-results.js';

export class GuardService {
  private readonly context: GuardContext;
  readonly prices: PriceBook;

  constructor(
    db: Db,
    counters: CounterStore,
    clock: Clock,
    log: Logger,
    observer: GuardObserver | null = null,
    instance: DaemonInstanceId | null = null,
  ) {
    this.context = new GuardContext(db, counters, clock, log, observer, instance);
    this.prices = this.context.prices;
  }

  startRun(workspaceId: string, input: RunStartInput, idempotency?: IdempotencyClaim): Promise<RunCreated> {
    return startRun(this.context, workspaceId, input, idempotency);
  }

  /**
   * A run started for a single proxied call, started with that call's step: one read of the decision's
   * inputs and one commit for both. The step is checked against the start's inputs (its rules are
   * the first four of the start's). No step when the start is BLOCKED. Answers once decided, the
   * commit under way (see `Decided`); in a workspace with a run limit, the decision holds only
   * under the admission lock until its commit, so there it answers once the record is durable.
   */
  async decideRunWithStep(
    workspaceId: string,
    input: RunStartInput,
    firstStep: Omit<StepInput, 'sequence'>,
  ): Promise<Decided<RunBegun>> {
    return beginRun(this.context, workspaceId, input, undefined, firstStep);
  }

  /**
   * A run started for a single proxied call has answered its call: from now it holds no concurrency slot
   * in this daemon's admissions, until its end (which follows) is written.
   */
  runAnswered(workspaceId: string, runId: string): void {
    this.context.releasedRuns.release(workspaceId, runId);
  }

  endRun(
    workspaceId: string,
    runId: string,
    status: 'COMPLETED' | 'FAILED',
    idempotency?: IdempotencyClaim,
    agentKeyId: string | null = null,
  ): Promise<RunEnded> {
    return endRun(this.context, workspaceId, runId, status, idempotency, agentKeyId);
  }

  /** Whether the API key started the run (an agent key acts only on those): see run-owner.ts. */
  runStartedBy(workspaceId: string, runId: string, apiKeyId: string): Promise<boolean> {
    return startedByKey(this.context, workspaceId, runId, apiKeyId);
  }

  /**
   * A step of a call forwarded while its record commits (the proxy): createStep with a sequence
   * of the server's, answering once decided, the insert under way (see `Decided`).
   */
  decideStep(workspaceId: string, runId: string, input: Omit<StepInput, 'sequence'>): Promise<Decided<StepCreated>> {
    return admitStep(this.context, workspaceId, runId, input);
  }

  createStep(
    workspaceId: string,
    runId: string,
    input: StepInput,
    idempotency?: IdempotencyClaim,
    agentKeyId: string | null = null,
  ): Promise<StepCreated> {
    return createStep(this.context, workspaceId, runId, input, idempotency, agentKeyId);
  }

  finishStep(
    workspaceId: string,
    runId: string,
    stepId: string,
    result: StepResult,
    idempotency?: IdempotencyClaim,
    agentKeyId: string | null = null,
  ): Promise<StepUpdated> {
    return finishStep(this.context, workspaceId, runId, stepId, result, idempotency, agentKeyId);
  }

  /** A result whose caller already has its answer (a proxied call): see step-results.ts. */
  recordResult(workspaceId: string, runId: string, stepId: string, result: StepResult): Promise<StepUpdated> {
    return recordResult(this.context, workspaceId, runId, stepId, result);
  }

  /** Resolves once every step and result submitted so far is written (before the stores close). */
  settled(): Promise<void> {
    return this.context.settled();
  }
}
