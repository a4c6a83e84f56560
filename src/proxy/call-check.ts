/**
 * Checking a proxied call and starting its step's record: the step is added to the named run, or,
 * when the call names no run, a run for this call alone is started with it (one commit). A denial throws a 403 refusal once its
 * record is durable. An allowed call comes back as soon as it is decided, its record committing:
 * the call is forwarded meanwhile, and nothing of its answer may be released before `recorded`
 * resolves.
 */
import type { FastifyBaseLogger } from 'fastify';
import { ApiError, isApiError } from '../errors.js';
import type { Decided } from '../guard/decided.js';
import type { GuardService } from '../guard/guard-service.js';
import type { StepCreated } from '../contract/runs.js';
import type { StepInput } from '../guard/step-input.js';
import type { CallStep } from './call-result.js';
import type { Target } from './call-target.js';
import { denialRefusal, ProxyRefusal } from './proxy-refusal.js';

export type StepRecorder = Pick<GuardService, 'decideStep' | 'decideRunWithStep' | 'endRun'>;

/** An allowed call, decided: its step, and its record on its way. */
export interface CheckedCall {
  step: CallStep;
  /**
   * Resolves once the step's record is durable; rejects with the refusal the call gets instead
   * (RUN_NOT_RUNNING, 503 when the database failed), and then the call has no record.
   */
  recorded: Promise<void>;
}

/** A named run that cannot take a step reads as the way it was named. */
export function namedRunRefusal(target: Target, error: unknown): Error {
  if (isApiError(error) && error.code === 'RUN_NOT_RUNNING') {
    // A token dies with its run. A run id names a run the caller may see, but not use any more.
    if (target.via === 'token')
      return new ApiError('UNAUTHORIZED', 'The proxy token has expired: its run is no longer RUNNING.');
    return new ProxyRefusal(403, 'RUN_NOT_RUNNING', 'The run is not RUNNING.');
  }
  if (isApiError(error) && error.code === 'RUN_NOT_FOUND' && target.via === 'token') {
    return new ApiError('UNAUTHORIZED', 'Invalid proxy token.');
  }
  return error instanceof Error ? error : new Error(String(error));
}

const nothing = (): void => undefined;

/** The allowed call's step, its record under way; throws a ProxyRefusal when the guard denies the call. */
export async function checkCall(
  guard: StepRecorder,
  target: Target,
  providerName: string,
  stepInput: Omit<StepInput, 'sequence'>,
  log: FastifyBaseLogger,
): Promise<CheckedCall> {
  let runId: string;
  let step: StepCreated;
  let recorded: Promise<void>;
  if (target.runId === null) {
    // A run for this call alone: started with its step, in one commit. The step's rules are the
    // first four of the start's, read from the same inputs, and the step-only rules (below).
    const started = await guard.decideRunWithStep(
      target.workspaceId,
      // The run is its key's, as a run the key started through the API.
      {
        user_id: target.userId!,
        metadata: { proxy: providerName },
        apiKeyId: target.apiKeyId,
        ...(target.tags && { tags: target.tags }),
      },
      { ...stepInput, apiKeyId: target.apiKeyId },
    );
    const { run } = started.decided;
    if (run.status === 'BLOCKED') {
      // A denial is answered once it is recorded, as every answer is.
      await started.recorded;
      throw denialRefusal({ decision: run.decision }, 'run');
    }
    runId = run.id;
    step = started.decided.step!;
    recorded = started.recorded.then(nothing);
  } else {
    runId = target.runId;
    let decided: Decided<StepCreated>;
    try {
      decided = await guard.decideStep(target.workspaceId, runId, { ...stepInput, apiKeyId: target.apiKeyId });
    } catch (error) {
      throw namedRunRefusal(target, error);
    }
    step = decided.decided;
    // Its insert fails as the run was named when the run ended meanwhile.
    recorded = decided.recorded.then(nothing, (error: unknown) => {
      throw namedRunRefusal(target, error);
    });
  }
  if (step.status === 'BLOCKED') {
    await recorded;
    // A step-only rule (model_priced) denied a call that has a run of its own: that run ends here.
    if (target.runId === null)
      await guard
        .endRun(target.workspaceId, runId, 'FAILED')
        .catch((error: unknown) => log.warn({ err: error }, "ending a denied call's run failed"));
    throw denialRefusal(step, 'model call');
  }
  return {
    step: {
      workspaceId: target.workspaceId,
      runId,
      stepId: step.id,
      endRun: target.via === 'auto',
      model: stepInput.model ?? null,
      userId: target.userId,
    },
    recorded,
  };
}
