/**
 * A `tools/call` as a TOOL_CALL step: decided by every rule before the tool is called, in the
 * named run or in a run started for this one call. A denial is answered once its record is
 * durable; an allowed call comes back as soon as it is decided, its record committing (the call
 * is forwarded meanwhile, and nothing of its answer is released before `recorded` resolves).
 */
import type { FastifyBaseLogger } from 'fastify';
import { ApiError, isApiError } from '../errors.js';
import type { CallStep } from '../proxy/call-result.js';
import type { Target } from '../proxy/call-target.js';
import type { StepRecorder } from '../proxy/call-check.js';
import type { Decision } from '../contract/decision.js';
import type { StepInput } from '../guard/step-input.js';
import type { ToolCall } from './jsonrpc.js';

/** Arguments kept whole in a step's input_data up to this size (JSON bytes); past it, an excerpt. */
export const TOOL_INPUT_MAX_BYTES = 64 * 1024;

export type ToolStep =
  | { allowed: false; stepId: string | null; decision: Decision }
  | { allowed: true; step: CallStep; recorded: Promise<void> };

/** A tool call's `input_data`: its arguments, or past TOOL_INPUT_MAX_BYTES an excerpt of their JSON. */
export function toolInput(args: Record<string, unknown> | null): Record<string, unknown> | null {
  if (args === null) return null;
  const json = JSON.stringify(args);
  if (Buffer.byteLength(json) <= TOOL_INPUT_MAX_BYTES) return args;
  return { truncated: true, bytes: Buffer.byteLength(json), excerpt: json.slice(0, 2_048).toWellFormed() };
}

export function toolStepInput(server: string, call: ToolCall): Omit<StepInput, 'sequence'> {
  return {
    type: 'TOOL_CALL',
    tool_name: `${server}.${call.tool}`,
    input_data: toolInput(call.arguments),
    // The loop rule compares whole calls, past the excerpt too.
    loopInput: { tool: call.tool, arguments: call.arguments },
    forwarded: true,
    mcp: { server, request_id: call.id },
  };
}

/** A named run that cannot take a step reads as the way it was named (as a model call's). */
function namedRunError(target: Target, error: unknown): unknown {
  if (isApiError(error) && error.code === 'RUN_NOT_RUNNING' && target.via === 'token')
    return new ApiError('UNAUTHORIZED', 'The proxy token has expired: its run is no longer RUNNING.');
  if (isApiError(error) && error.code === 'RUN_NOT_FOUND' && target.via === 'token')
    return new ApiError('UNAUTHORIZED', 'Invalid proxy token.');
  return error;
}

export async function decideToolStep(
  guard: StepRecorder,
  target: Target,
  server: string,
  call: ToolCall,
  log: FastifyBaseLogger,
): Promise<ToolStep> {
  const input = { ...toolStepInput(server, call), apiKeyId: target.apiKeyId };
  if (target.runId === null) {
    const started = await guard.decideRunWithStep(
      target.workspaceId,
      { user_id: target.userId!, metadata: { mcp: server }, apiKeyId: target.apiKeyId },
      input,
    );
    const { run, step } = started.decided;
    if (run.status === 'BLOCKED') {
      await started.recorded;
      return { allowed: false, stepId: null, decision: run.decision };
    }
    if (step!.status === 'BLOCKED') {
      await started.recorded;
      // The run was started for this call alone: it ends with its denial.
      await guard
        .endRun(target.workspaceId, run.id, 'FAILED')
        .catch((error: unknown) => log.warn({ err: error }, "ending a denied tool call's run failed"));
      return { allowed: false, stepId: step!.id, decision: step!.decision };
    }
    return {
      allowed: true,
      step: { workspaceId: target.workspaceId, runId: run.id, stepId: step!.id, endRun: true },
      recorded: started.recorded.then(() => undefined),
    };
  }
  const runId = target.runId;
  let decided;
  try {
    decided = await guard.decideStep(target.workspaceId, runId, input);
  } catch (error) {
    throw namedRunError(target, error);
  }
  const recorded = decided.recorded.then(
    () => undefined,
    (error: unknown) => Promise.reject(namedRunError(target, error) as Error),
  );
  if (decided.decided.status === 'BLOCKED') {
    await recorded;
    return { allowed: false, stepId: decided.decided.id, decision: decided.decided.decision };
  }
  return {
    allowed: true,
    step: { workspaceId: target.workspaceId, runId, stepId: decided.decided.id, endRun: false },
    recorded,
  };
}
