/**
 * Recording a proxied call's result after its answer: its status, tokens and duration (hence its
 * cost), and, for a call the proxy started a run for, that run's end. The client already has its
 * answer and the provider bills the call, so a write the database cannot take now is retried
 * until it can: a moment without Postgres neither loses the spend nor leaves the run holding a
 * concurrent-run slot.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyBaseLogger } from 'fastify';
import { isApiError } from '../errors.js';
import type { GuardService } from '../guard/guard-service.js';
import type { RecordedStep } from '../guard/step-results.js';
import type { StepResult } from '../store/step-finish.js';
import { logPlainInfo } from '../logger.js';
import { isDatabaseDown } from '../store/db.js';
import type { CallsInProgress } from './calls-in-progress.js';
import type { TokenFields } from './providers/index.js';

/** Waits between attempts at a proxied call's record; the last repeats. */
const RECORD_RETRY_DELAYS_MS = [100, 250, 500, 1_000, 2_000, 5_000];
/** How long a proxied call's record is retried: longer than a restart or a failover of Postgres. */
const RECORD_RETRY_FOR_MS = 10 * 60_000;

/** The step a forwarded call recorded, and whether its run was started for this call alone (to end with it). */
export interface CallStep {
  workspaceId: string;
  runId: string;
  stepId: string;
  endRun: boolean;
  /** For the call's log line: the model its request named, and the run's user. */
  model?: string | null;
  userId?: string | null;
}

export type CallStatus = 'COMPLETED' | 'FAILED';

/**
 * Records how a call ended; called once per call, returns at once (the writes go on).
 * `answerModel`: the model the answer named, which prices a step whose request named none.
 * `notReached`: a tool call that never reached its tool, charged no price per call.
 */
export type RecordResult = (
  status: CallStatus,
  usage: TokenFields,
  outcome: Record<string, unknown>,
  answerModel?: string | null,
  notReached?: boolean,
) => void;

/**
 * The one `info` line of a proxied call, written once its step is recorded: who, which run and
 * model, what the guard decided, how it ended, its tokens, cost and time. Built from values at hand.
 */
function logCall(
  log: FastifyBaseLogger,
  step: CallStep,
  result: {
    status: CallStatus;
    model: string | null;
    durationMs: number;
    promptTokens: number | null;
    completionTokens: number | null;
  },
  stored: Partial<RecordedStep>,
): void {
  logPlainInfo(log, 'proxied call', () => ({
    user: stored.userId ?? step.userId ?? null,
    run: step.runId,
    step: step.stepId,
    model: step.model ?? result.model,
    decision: 'ALLOWED',
    status: result.status,
    promptTokens: result.promptTokens,
    completionTokens: result.completionTokens,
    costUsd: stored.costMicros === undefined ? null : stored.costMicros / 1e6,
    ms: result.durationMs,
  }));
}

export type ResultWriter = Pick<GuardService, 'finishStep' | 'recordResult' | 'endRun' | 'runAnswered'>;

/**
 * `write()` until it succeeds, while the database is down (any other failure is final), for up to
 * `retryForMs`; once `stopping` is aborted, one more attempt only.
 */
export async function untilStored<T>(
  write: () => Promise<T>,
  stopping: AbortSignal,
  retrying: (error: unknown) => void,
  retryForMs: number = RECORD_RETRY_FOR_MS,
  /** A first attempt, made by the caller, failed with this: the next waits first. */
  failed: { error: unknown } | null = null,
): Promise<T> {
  const giveUpAt = performance.now() + retryForMs;
  for (let attempt = 0; ; attempt++) {
    let error: unknown;
    if (attempt === 0 && failed) error = failed.error;
    else
      try {
        return await write();
      } catch (caught) {
        error = caught;
      }
    // The API's own reading of a failure (it answers 503): the database is down, for now.
    if (!isDatabaseDown(error) || stopping.aborted || performance.now() > giveUpAt) throw error;
    retrying(error);
    const delay = RECORD_RETRY_DELAYS_MS[Math.min(attempt, RECORD_RETRY_DELAYS_MS.length - 1)]!;
    await sleep(delay, undefined, { signal: stopping }).catch(() => {});
  }
}

/**
 * The recorder of one call's result, made as its forwarding starts: the call's duration counts
 * from here, and `calls` counts it in progress until its result is written (or given up on). The
 * result waits for the step's record (`stepRecorded`); a step whose record failed has no result.
 */
export function resultRecorder(
  guard: ResultWriter,
  calls: CallsInProgress,
  step: CallStep,
  stepRecorded: Promise<void>,
  log: FastifyBaseLogger,
  /** Told once the result is written (the result's lag, in metrics). */
  onWritten: () => void = () => {},
): RecordResult {
  const recording = new ResultRecording(guard, calls, step, log, onWritten);
  // Never recorded: the call was refused, and nothing is left to write for it.
  stepRecorded.then(() => (recording.stepDurable = true), recording.done);
  return (status, usage, outcome, answerModel = null, notReached = false) => {
    const result: StepResult & { status: CallStatus; model: string | null; durationMs: number } = {
      status,
      model: answerModel,
      durationMs: Math.round(performance.now() - recording.started),
      promptTokens: usage.promptTokens,
      completionTokens: usage.completionTokens,
      cacheReadTokens: usage.cacheReadTokens,
      cacheWriteTokens: usage.cacheWriteTokens,
      reasoningTokens: usage.reasoningTokens,
      outputData: outcome,
    };
    if (notReached) result.toolNotReached = true;
    // An answer is released only once its step is durable: then this goes at once. A call that
    // ended before (its client left while the record committed) waits for it; no step, no result.
    if (recording.stepDurable) void recording.record(result);
    else stepRecorded.then(() => recording.record(result), recording.done);
  };
}

/**
 * One call's result on its way: its work in methods rather than in closures made for each call
 * (every proxied call has one), its writes retried while the database is down.
 */
class ResultRecording {
  readonly started = performance.now();
  /** Ends the call's count in progress (`calls`). */
  readonly done: () => void;
  stepDurable = false;
  /** Attempts at writing the result so far. */
  private attempts = 0;

  constructor(
    private readonly guard: ResultWriter,
    private readonly calls: CallsInProgress,
    private readonly step: CallStep,
    private readonly log: FastifyBaseLogger,
    private readonly onWritten: () => void,
  ) {
    this.done = calls.begin();
  }

  /**
   * Writes the result (and ends a run of the call's own); never rejects. A run started for this
   * call alone ends right after its result: that result goes at once, not with the results that
   * wait for company, so the run stops counting against the concurrent-run limit as soon as it
   * can. The first attempt is made here: only a failed one goes on in `untilStored`'s loop.
   */
  async record(result: StepResult & { status: CallStatus; model: string | null; durationMs: number }): Promise<void> {
    const { guard, step, log } = this;
    try {
      // A run started for this call alone stops holding a concurrency slot now; its end follows.
      if (step.endRun) guard.runAnswered(step.workspaceId, step.runId);
      let stored: RecordedStep | null;
      try {
        stored = (await this.writeResult(result)) as RecordedStep;
      } catch (error) {
        stored = await this.retryResult(result, error);
      }
      if (stored) logCall(log, step, result, stored);
      this.onWritten();
      if (step.endRun) await this.endRun(result.status);
    } catch (error) {
      log.error({ err: error, stepId: step.stepId }, 'recording a proxied call failed');
    } finally {
      this.done();
    }
  }

  /**
   * The result's first attempt failed: retried while the database is down. A result already
   * taken (an attempt whose answer was lost) is final.
   */
  private async retryResult(result: StepResult, first: unknown): Promise<RecordedStep | null> {
    try {
      return (await untilStored(
        () => this.writeResult(result),
        this.calls.stopping,
        (error) => this.retried('recording a proxied call', error),
        RECORD_RETRY_FOR_MS,
        { error: first },
      )) as RecordedStep;
    } catch (error) {
      if (!(isApiError(error) && error.code === 'STEP_ALREADY_FINISHED')) throw error;
      // After a retry, our own earlier attempt landed; at the first, someone else finished the step.
      if (this.attempts === 1)
        this.log.warn(
          { stepId: this.step.stepId },
          "a proxied call's step was already finished; its result was not recorded",
        );
      return null;
    }
  }

  private writeResult(result: StepResult) {
    const { guard, step } = this;
    this.attempts++;
    return step.endRun
      ? guard.finishStep(step.workspaceId, step.runId, step.stepId, result)
      : guard.recordResult(step.workspaceId, step.runId, step.stepId, result);
  }

  private async endRun(status: CallStatus): Promise<void> {
    const { guard, step } = this;
    await untilStored(
      () => guard.endRun(step.workspaceId, step.runId, status),
      this.calls.stopping,
      (error) => this.retried("ending a proxied call's run", error),
    ).catch((error: unknown) => {
      if (!(isApiError(error) && error.code === 'RUN_NOT_RUNNING')) throw error;
    });
  }

  private retried(what: string, error: unknown): void {
    this.log.warn({ err: error, stepId: this.step.stepId }, `${what} failed; retrying`);
  }
}
