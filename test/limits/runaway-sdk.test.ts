/**
 * The SDK's side of runaway limits (issue #39): `guard.run(userId, fn, { limits })` starts the run
 * with its own limits, the handle shows the limits that apply, and a step past one throws
 * GuardBlockedError with the reason and its numbers; the guarded function of that step never runs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GuardBlockedError, GuardClient } from '../../clients/typescript/src/index.js';
import { startTestApi, type TestApi } from '../support/harness.js';

describe('runaway limits in the SDK', () => {
  let api: TestApi;
  let guard: GuardClient;

  beforeAll(async () => {
    api = await startTestApi('postgres+redis');
    guard = new GuardClient({ apiKey: api.apiKey, baseUrl: api.url, maxRetries: 0 });
    expect((await api.request('PATCH', '/v1/workspace', { run_max_steps: 5 })).status).toBe(200);
  });
  afterAll(async () => {
    await guard?.close();
    await api?.close();
  });

  it('when a run sets maxSteps, then the step past it throws GuardBlockedError with the numbers and does not run', async () => {
    const ran: number[] = [];
    const error = await guard
      .run(
        'sdk-user',
        async (run) => {
          expect(run.limits).toEqual({ max_steps: 2, max_cost_usd: 0.5, max_identical_calls: null });
          for (let call = 1; call <= 3; call++) {
            await run.toolCall(async () => ran.push(call), { toolName: 'search', inputData: { call } });
          }
        },
        { limits: { maxSteps: 2, maxCostUsd: 0.5 } },
      )
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(GuardBlockedError);
    const blocked = error as GuardBlockedError;
    expect(blocked.denyReason).toBe('RUN_STEP_LIMIT_EXCEEDED');
    expect(blocked.detail).toEqual({ steps: 2, limit: 2 });
    expect(blocked.message).toContain(
      "the run's step limit is reached (RUN_STEP_LIMIT_EXCEEDED; run step limit reached: 2 of 2 steps)",
    );
    expect(ran).toEqual([1, 2]);
  });

  it("when a run asks for more than the workspace's default, then the default applies", async () => {
    const limits = await guard.run('sdk-user', async (run) => run.limits, { limits: { maxSteps: 50 } });
    expect(limits).toEqual({ max_steps: 5, max_cost_usd: null, max_identical_calls: null });
  });

  it('when a run repeats one tool call past maxIdenticalCalls, then the loop is denied', async () => {
    const error = await guard
      .run(
        'sdk-user',
        async (run) => {
          for (let call = 1; call <= 3; call++) {
            await run.toolCall(async () => call, { toolName: 'poll', inputData: { ready: false } });
          }
        },
        { limits: { maxIdenticalCalls: 2 } },
      )
      .catch((caught: unknown) => caught);
    expect((error as GuardBlockedError).denyReason).toBe('REPEATED_CALL_LOOP');
    expect((error as GuardBlockedError).detail).toEqual({ identical_calls: 2, limit: 2 });
  });
});
