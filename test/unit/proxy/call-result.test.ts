/** Recording a proxied call's result, against a fake guard: what is written, retried and logged. */
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../../src/errors.js';
import { CallsInProgress } from '../../../src/proxy/calls-in-progress.js';
import { resultRecorder, untilStored, type CallStep, type ResultWriter } from '../../../src/proxy/call-result.js';
import { NO_TOKENS, type TokenFields } from '../../../src/proxy/providers/index.js';
import { rememberingLogger } from './proxy-fakes.js';

const DATABASE_DOWN = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
const USAGE: TokenFields = {
  ...NO_TOKENS,
  promptTokens: 12,
  completionTokens: 34,
  cacheReadTokens: 5,
  reasoningTokens: 7,
};

/** A guard that keeps the writes it is asked for and fails the first ones as told. */
function fakeGuard(failures: { result?: Error[]; endRun?: Error[] } = {}) {
  const writes: string[] = [];
  const results: unknown[] = [];
  const guard: ResultWriter = {
    runAnswered: (workspaceId, runId) => void writes.push(`answered ${workspaceId}/${runId}`),
    recordResult: async (_workspaceId, _runId, stepId, result) => {
      writes.push(`recordResult ${stepId}`);
      results.push(result);
      const failure = failures.result?.shift();
      if (failure) throw failure;
      return {} as never;
    },
    finishStep: async (_workspaceId, _runId, stepId, result) => {
      writes.push(`finishStep ${stepId}`);
      results.push(result);
      const failure = failures.result?.shift();
      if (failure) throw failure;
      return {} as never;
    },
    endRun: async (_workspaceId, runId, status) => {
      writes.push(`endRun ${runId} ${status}`);
      const failure = failures.endRun?.shift();
      if (failure) throw failure;
      return {} as never;
    },
  };
  return { guard, writes, results };
}

const namedRunStep: CallStep = { workspaceId: 'ws', runId: 'run-1', stepId: 'step-1', endRun: false };
const ownRunStep: CallStep = { workspaceId: 'ws', runId: 'run-2', stepId: 'step-2', endRun: true };

describe('resultRecorder', () => {
  it("when a named run's call completes, then its result is recorded with its usage and outcome", async () => {
    const { guard, writes, results } = fakeGuard();
    const calls = new CallsInProgress();
    const record = resultRecorder(guard, calls, namedRunStep, Promise.resolve(), rememberingLogger());
    record('COMPLETED', USAGE, { http_status: 200 }, 'gpt-4o-mini-2024-07-18');
    await calls.none();
    expect(writes).toEqual(['recordResult step-1']);
    expect(results[0]).toEqual({
      status: 'COMPLETED',
      model: 'gpt-4o-mini-2024-07-18',
      durationMs: expect.any(Number),
      promptTokens: 12,
      completionTokens: 34,
      cacheReadTokens: 5,
      cacheWriteTokens: null,
      reasoningTokens: 7,
      outputData: { http_status: 200 },
    });
  });

  it('when a call has a run of its own, then the slot is freed at once, the step finished, the run ended', async () => {
    const { guard, writes } = fakeGuard();
    const calls = new CallsInProgress();
    const stepRecorded = Promise.resolve();
    const record = resultRecorder(guard, calls, ownRunStep, stepRecorded, rememberingLogger());
    await stepRecorded; // as when an answer is released: its step is durable
    record('FAILED', NO_TOKENS, { error: 'CLIENT_ABORTED' });
    expect(writes).toEqual(['answered ws/run-2', 'finishStep step-2']);
    await calls.none();
    expect(writes).toEqual(['answered ws/run-2', 'finishStep step-2', 'endRun run-2 FAILED']);
  });

  it("when the call's step is still being recorded, then its result waits for that record", async () => {
    const { guard, writes } = fakeGuard();
    const calls = new CallsInProgress();
    let stepDurable!: () => void;
    const stepRecorded = new Promise<void>((resolve) => (stepDurable = resolve));
    resultRecorder(guard, calls, ownRunStep, stepRecorded, rememberingLogger())('COMPLETED', USAGE, {});
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(writes).toEqual([]);
    stepDurable();
    await calls.none();
    expect(writes).toEqual(['answered ws/run-2', 'finishStep step-2', 'endRun run-2 COMPLETED']);
  });

  it("when the call's step could not be recorded, then no result is written and the call stops counting", async () => {
    const { guard, writes } = fakeGuard();
    const calls = new CallsInProgress();
    const log = rememberingLogger();
    const record = resultRecorder(guard, calls, ownRunStep, Promise.reject(DATABASE_DOWN), log);
    // The call ends (its upstream request aborted) only after its record failed, if at all.
    await calls.none();
    record('FAILED', NO_TOKENS, { error: 'CLIENT_ABORTED' });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(writes).toEqual([]);
    expect(log.lines).toEqual([]);
  });

  it('when the database is down for a moment, then the result and the run end are retried until stored', async () => {
    const { guard, writes } = fakeGuard({ result: [DATABASE_DOWN], endRun: [DATABASE_DOWN] });
    const calls = new CallsInProgress();
    const log = rememberingLogger();
    resultRecorder(guard, calls, ownRunStep, Promise.resolve(), log)('COMPLETED', USAGE, {});
    await calls.none();
    expect(writes).toEqual([
      'answered ws/run-2',
      'finishStep step-2',
      'finishStep step-2',
      'endRun run-2 COMPLETED',
      'endRun run-2 COMPLETED',
    ]);
    expect(log.lines.map((line) => line.message)).toEqual([
      'recording a proxied call failed; retrying',
      // The call's one info line, once its result is stored.
      'proxied call',
      "ending a proxied call's run failed; retrying",
    ]);
  });

  it('when a retried result was already taken by the first attempt, then nothing more is said', async () => {
    const { guard } = fakeGuard({ result: [DATABASE_DOWN, new ApiError('STEP_ALREADY_FINISHED')] });
    const calls = new CallsInProgress();
    const log = rememberingLogger();
    resultRecorder(guard, calls, namedRunStep, Promise.resolve(), log)('COMPLETED', USAGE, {});
    await calls.none();
    expect(log.lines.map((line) => line.message)).toEqual(['recording a proxied call failed; retrying']);
  });

  it('when someone else finished the step first, then a warning says the result was not recorded', async () => {
    const { guard } = fakeGuard({ result: [new ApiError('STEP_ALREADY_FINISHED')] });
    const calls = new CallsInProgress();
    const log = rememberingLogger();
    resultRecorder(guard, calls, namedRunStep, Promise.resolve(), log)('COMPLETED', USAGE, {});
    await calls.none();
    expect(log.lines).toEqual([
      {
        level: 'warn',
        fields: { stepId: 'step-1' },
        message: "a proxied call's step was already finished; its result was not recorded",
      },
    ]);
  });

  it('when the run already ended, then ending it again is not an error', async () => {
    const { guard } = fakeGuard({ endRun: [new ApiError('RUN_NOT_RUNNING')] });
    const calls = new CallsInProgress();
    const log = rememberingLogger();
    resultRecorder(guard, calls, ownRunStep, Promise.resolve(), log)('COMPLETED', USAGE, {});
    await calls.none();
    expect(log.lines.map((line) => line.message)).toEqual(['proxied call']);
  });

  it('when the write fails for another reason, then it is logged once and the call stops counting', async () => {
    const { guard, writes } = fakeGuard({ result: [new Error('constraint violated')] });
    const calls = new CallsInProgress();
    const log = rememberingLogger();
    resultRecorder(guard, calls, ownRunStep, Promise.resolve(), log)('COMPLETED', USAGE, {});
    await calls.none();
    expect(writes).toEqual(['answered ws/run-2', 'finishStep step-2']);
    expect(log.lines.map((line) => [line.level, line.message])).toEqual([['error', 'recording a proxied call failed']]);
  });
});

describe('untilStored', () => {
  it('when the app is stopping, then a failing write is tried once more only', async () => {
    const calls = new CallsInProgress();
    calls.stop();
    let attempts = 0;
    const write = async () => {
      attempts++;
      throw DATABASE_DOWN;
    };
    await expect(untilStored(write, calls.stopping, () => {})).rejects.toBe(DATABASE_DOWN);
    expect(attempts).toBe(1);
  });

  it('when the database stays down past the retry window, then the failure is final', async () => {
    let attempts = 0;
    const write = async () => {
      attempts++;
      throw DATABASE_DOWN;
    };
    await expect(untilStored(write, new AbortController().signal, () => {}, 150)).rejects.toBe(DATABASE_DOWN);
    // Attempts at 0 and ~100 ms, then one after the 250 ms wait that finds the window past.
    expect(attempts).toBe(3);
  });
});
