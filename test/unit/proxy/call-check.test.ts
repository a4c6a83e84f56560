/** Checking a proxied call and starting its step's record, against a fake guard. */
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../../src/errors.js';
import { checkCall, type StepRecorder } from '../../../src/proxy/call-check.js';
import type { Target } from '../../../src/proxy/call-target.js';
import { ProxyRefusal } from '../../../src/proxy/proxy-refusal.js';
import type { Decision } from '../../../src/contract/decision.js';
import { rememberingLogger } from './proxy-fakes.js';

const ALLOW: Decision = { outcome: 'ALLOW', reason: null, evaluated_rules: {} };
const DENY_UNPRICED: Decision = { outcome: 'DENY', reason: 'MODEL_NOT_PRICED', evaluated_rules: {} };
const DENY_BLOCKED: Decision = { outcome: 'DENY', reason: 'USER_BLOCKED', evaluated_rules: {} };
const INPUT = { type: 'MODEL_CALL' as const, model: 'gpt-4o', input_data: {} };

const named = (via: 'token' | 'run'): Target => ({
  workspaceId: 'ws',
  runId: 'run-1',
  userId: null,
  via,
  apiKeyId: 'k1',
});
const runless: Target = { workspaceId: 'ws', runId: null, userId: 'alice', via: 'auto', apiKeyId: 'k1' };

function fakeGuard(answers: { step?: Decision; run?: Decision; createFails?: Error; recordFails?: Error }) {
  const calls: string[] = [];
  const step = (decision: Decision) => ({
    id: 'step-1',
    run_id: 'run-1',
    sequence: 1,
    status: decision.outcome === 'ALLOW' ? ('ALLOWED' as const) : ('BLOCKED' as const),
    decision,
  });
  // The record commits after the decision: it fails as told, once asked about.
  const recorded = <T>(value: T) =>
    answers.recordFails ? Promise.reject(answers.recordFails) : Promise.resolve(value);
  const guard: StepRecorder = {
    decideStep: async (_workspaceId, runId, input) => {
      calls.push(`decideStep ${runId} ${JSON.stringify(input)}`);
      if (answers.createFails) throw answers.createFails;
      const decided = step(answers.step ?? ALLOW);
      return { decided, recorded: recorded(decided) };
    },
    decideRunWithStep: async (_workspaceId, run) => {
      calls.push(`decideRunWithStep ${run.user_id} ${JSON.stringify(run.metadata)} ${run.apiKeyId}`);
      const runDecision = answers.run ?? ALLOW;
      const blocked = runDecision.outcome === 'DENY';
      const decided = {
        run: { id: 'own-run', status: blocked ? 'BLOCKED' : 'RUNNING', decision: runDecision } as never,
        step: blocked ? null : step(answers.step ?? ALLOW),
      };
      return { decided, recorded: recorded(decided) };
    },
    endRun: async (_workspaceId, runId, status) => {
      calls.push(`endRun ${runId} ${status}`);
      return {} as never;
    },
  };
  return { guard, calls };
}

async function refusalOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => 'allowed',
    (error: unknown) => error,
  );
}

describe('checkCall', () => {
  it('when a named run allows the step, then the step is decided with a server-assigned sequence and its record awaited', async () => {
    const { guard, calls } = fakeGuard({});
    const { step, recorded } = await checkCall(guard, named('run'), 'openai', INPUT, rememberingLogger());
    expect(step).toEqual({
      workspaceId: 'ws',
      runId: 'run-1',
      stepId: 'step-1',
      endRun: false,
      model: 'gpt-4o',
      userId: null,
    });
    await expect(recorded).resolves.toBeUndefined();
    expect(calls).toEqual([`decideStep run-1 ${JSON.stringify({ ...INPUT, apiKeyId: 'k1' })}`]);
  });

  it('when a call has no run, then a run of its own starts with its step and ends with it', async () => {
    const { guard, calls } = fakeGuard({});
    const { step } = await checkCall(guard, runless, 'openai', INPUT, rememberingLogger());
    expect(step).toEqual({
      workspaceId: 'ws',
      runId: 'own-run',
      stepId: 'step-1',
      endRun: true,
      model: 'gpt-4o',
      userId: 'alice',
    });
    expect(calls).toEqual(['decideRunWithStep alice {"proxy":"openai"} k1']);
  });

  it("when a run-less call's run is denied, then the refusal is a 403 for the run, with no step", async () => {
    const { guard } = fakeGuard({ run: DENY_BLOCKED });
    const refusal = await refusalOf(checkCall(guard, runless, 'openai', INPUT, rememberingLogger()));
    expect(refusal).toBeInstanceOf(ProxyRefusal);
    expect(refusal).toMatchObject({ statusCode: 403, code: 'USER_BLOCKED', stepId: undefined });
    expect((refusal as Error).message).toMatch(/^runguard denied this run: USER_BLOCKED/);
  });

  it("when a run-less call's step is denied, then its run ends FAILED and the refusal names the step", async () => {
    const { guard, calls } = fakeGuard({ step: DENY_UNPRICED });
    const refusal = await refusalOf(checkCall(guard, runless, 'openai', INPUT, rememberingLogger()));
    expect(refusal).toMatchObject({ statusCode: 403, code: 'MODEL_NOT_PRICED', stepId: 'step-1' });
    expect((refusal as Error).message).toMatch(/^runguard denied this model call/);
    expect(calls).toEqual(['decideRunWithStep alice {"proxy":"openai"} k1', 'endRun own-run FAILED']);
  });

  it("when a named run's step is denied, then the run is left as it is", async () => {
    const { guard, calls } = fakeGuard({ step: DENY_BLOCKED });
    const refusal = await refusalOf(checkCall(guard, named('run'), 'openai', INPUT, rememberingLogger()));
    expect(refusal).toMatchObject({ statusCode: 403, code: 'USER_BLOCKED', stepId: 'step-1' });
    expect(calls).toEqual([`decideStep run-1 ${JSON.stringify({ ...INPUT, apiKeyId: 'k1' })}`]);
  });

  it("when a denial's record fails, then the call fails with that failure, not the 403 it has no record of", async () => {
    const down = new ApiError('SERVICE_UNAVAILABLE');
    const { guard } = fakeGuard({ step: DENY_BLOCKED, recordFails: down });
    const refusal = await refusalOf(checkCall(guard, named('run'), 'openai', INPUT, rememberingLogger()));
    expect(refusal).toBe(down);
  });

  it.each([
    ['token', 'RUN_NOT_RUNNING', 'UNAUTHORIZED', 'The proxy token has expired: its run is no longer RUNNING.'],
    ['token', 'RUN_NOT_FOUND', 'UNAUTHORIZED', 'Invalid proxy token.'],
    ['run', 'RUN_NOT_RUNNING', 'RUN_NOT_RUNNING', 'The run is not RUNNING.'],
    ['run', 'RUN_NOT_FOUND', 'RUN_NOT_FOUND', 'Run not found.'],
  ] as const)(
    'when a run named by %s fails with %s, then the call is refused with %s',
    async (via, cause, code, message) => {
      const { guard } = fakeGuard({ createFails: new ApiError(cause) });
      const refusal = await refusalOf(checkCall(guard, named(via), 'openai', INPUT, rememberingLogger()));
      expect(refusal).toMatchObject({ code, message });
    },
  );

  it.each([
    ['token', 'UNAUTHORIZED', 'The proxy token has expired: its run is no longer RUNNING.'],
    ['run', 'RUN_NOT_RUNNING', 'The run is not RUNNING.'],
  ] as const)(
    "when a run named by %s ends before the step's record commits, then the record fails with %s",
    async (via, code, message) => {
      const { guard } = fakeGuard({ recordFails: new ApiError('RUN_NOT_RUNNING') });
      const { recorded } = await checkCall(guard, named(via), 'openai', INPUT, rememberingLogger());
      await expect(recorded).rejects.toMatchObject({ code, message });
    },
  );
});
