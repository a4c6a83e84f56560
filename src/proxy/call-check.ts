/**
 * Checking a proxied call and recording its step, before anything is forwarded: the step is
 * added to the named run, or a run of the call's own is started with it (one commit). A denial
 * throws a 403 refusal; the step's record has committed when this returns.
 */
import type { FastifyBaseLogger } from 'fastify';
import { ApiError, isApiError } from '../errors.js';
import type { CreatedStep, GuardService, StepInput } from '../service/guard-service.js';
import type { CallStep } from './call-result.js';
import type { Target } from './call-target.js';
import { denialRefusal, ProxyRefusal } from './proxy-refusal.js';

export type StepRecorder = Pick<GuardService, 'createStep' | 'startRunWithStep' | 'endRun'>;

/** Adds the step to a named run; a run that cannot take it reads as the way it was named. */
async function stepOfNamedRun(
  guard: StepRecorder,
  target: Target,
  runId: string,
  input: Omit<StepInput, 'sequence'>,
): Promise<CreatedStep> {
  try {
    return await guard.createStep(target.workspaceId, runId, { ...input, sequence: null });
  } catch (error) {
    if (isApiError(error) && error.code === 'RUN_NOT_RUNNING') {
      // A token dies with its run. A run id names a run the caller may see, but not use any more.
      if (target.via === 'token')
        throw new ApiError('UNAUTHORIZED', 'The proxy token has expired: its run is no longer RUNNING.');
      throw new ProxyRefusal(403, 'RUN_NOT_RUNNING', 'The run is not RUNNING.');
    }
    if (isApiError(error) && error.code === 'RUN_NOT_FOUND' && target.via === 'token') {
      throw new ApiError('UNAUTHORIZED', 'Invalid proxy token.');
    }
    throw error;
  }
}

/** The allowed call's step, recorded; throws a ProxyRefusal when the guard denies the call. */
export async function checkCall(
  guard: StepRecorder,
  target: Target,
  providerName: string,
  stepInput: Omit<StepInput, 'sequence'>,
  log: FastifyBaseLogger,
): Promise<CallStep> {
  let runId: string;
  let step: CreatedStep;
  if (target.runId === null) {
    // A run of the call's own: started with its step, in one commit. The step's rules are the
    // first four of the start's, read from the same inputs, and the step-only rules (below).
    const started = await guard.startRunWithStep(
      target.workspaceId,
      { user_id: target.userId!, metadata: { proxy: providerName } },
      stepInput,
    );
    if (started.run.status === 'BLOCKED') throw denialRefusal({ decision: started.run.decision }, 'run');
    runId = started.run.id;
    step = started.step!;
  } else {
    runId = target.runId;
    step = await stepOfNamedRun(guard, target, runId, stepInput);
  }
  if (step.status === 'BLOCKED') {
    // A step-only rule (model_priced) denied the call of a run of its own: that run ends here.
    if (target.runId === null)
      await guard
        .endRun(target.workspaceId, runId, 'FAILED')
        .catch((error: unknown) => log.warn({ err: error }, "ending a denied call's run failed"));
    throw denialRefusal(step, 'model call');
  }
  return { workspaceId: target.workspaceId, runId, stepId: step.id, endRun: target.via === 'auto' };
}
