import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  ClientClosedError,
  ConflictError,
  GuardBlockedError,
  GuardClient,
  GuardConfigError,
  GuardError,
  NoActiveRunError,
} from '../../../clients/typescript/src/index.js';
import { API_KEY, fakeRunguardAndClient, FakeRunguard } from '../../client/fake-server.js';

let server: FakeRunguard;
let guard: GuardClient;
let close: () => Promise<void>;

beforeEach(async () => {
  ({ server, guard, close } = await fakeRunguardAndClient());
});

afterEach(() => close());

describe('GuardClient.run', () => {
  it('when fn resolves, then the run is ended COMPLETED and its value returned', async () => {
    const value = await guard.run(
      'user-1',
      async (run) => {
        expect(run.userId).toBe('user-1');
        expect(run.id).toMatch(/^[0-9a-f-]{36}$/);
        return { answer: 42 };
      },
      { metadata: { ticket: 42 } },
    );

    expect(value).toEqual({ answer: 42 });
    const run = server.onlyRun();
    expect(run.status).toBe('COMPLETED');
    expect(run.metadata).toEqual({ ticket: 42 });
    const [start] = server.requestsTo('POST', /^\/v1\/runs\/$/);
    expect(start?.body).toEqual({ user_id: 'user-1', metadata: { ticket: 42 } });
    expect(start?.headers['authorization']).toBe(`Bearer ${API_KEY}`);
    expect(server.requestsTo('POST', /\/end$/)[0]?.body).toEqual({ status: 'COMPLETED' });
  });

  it('when no metadata is given, then none is sent', async () => {
    await guard.run('user-1', () => undefined);
    expect(server.requestsTo('POST', /^\/v1\/runs\/$/)[0]?.body).toEqual({ user_id: 'user-1' });
  });

  it('when fn throws, then the run is ended FAILED and the same error object is re-thrown', async () => {
    const boom = new Error('boom');
    const caught = await guard
      .run('user-1', async () => {
        throw boom;
      })
      .catch((error: unknown) => error);

    expect(caught).toBe(boom);
    expect(server.onlyRun().status).toBe('FAILED');
  });

  it('when fn throws synchronously, then the run is still ended FAILED', async () => {
    const boom = new TypeError('sync boom');
    await expect(
      guard.run('user-1', () => {
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(server.onlyRun().status).toBe('FAILED');
  });

  it("when fn throws and ending the run fails too, then fn's error is re-thrown", async () => {
    const boom = new Error('boom');
    const noRetry = new GuardClient({ apiKey: API_KEY, baseUrl: server.url, maxRetries: 0 });
    await expect(
      noRetry.run('user-1', async () => {
        server.failNext(1, { kind: 'status', status: 500 });
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(server.onlyRun().status).toBe('RUNNING');
    await noRetry.close();
  });

  it('when the run start is denied, then fn never runs and GuardBlockedError says why', async () => {
    server.blockedUsers.add('mallory');
    let called = false;
    const error = await guard
      .run('mallory', () => {
        called = true;
      })
      .catch((e: unknown) => e);

    expect(called).toBe(false);
    expect(error).toBeInstanceOf(GuardBlockedError);
    expect(error).toBeInstanceOf(GuardError);
    const blocked = error as GuardBlockedError;
    expect(blocked.denyReason).toBe('USER_BLOCKED');
    expect(blocked.reason).toBe('Run start for user "mallory" was blocked: the user is blocked (USER_BLOCKED).');
    expect(blocked.message).toBe(blocked.reason);
    expect(blocked.runId).toBe(server.onlyRun().id);
    expect(blocked.stepId).toBeUndefined();
    expect(blocked.userId).toBe('mallory');
    // A BLOCKED run is already final: the client must not try to end it.
    expect(server.requestsTo('POST', /\/end$/)).toHaveLength(0);
  });

  it('when the kill switch is on, then the deny reason is KILL_SWITCH_ACTIVE', async () => {
    server.killSwitch = true;
    await expect(guard.run('user-1', () => 1)).rejects.toMatchObject({
      name: 'GuardBlockedError',
      denyReason: 'KILL_SWITCH_ACTIVE',
      reason: expect.stringContaining('kill switch'),
    });
  });

  it('when ending the run answers 409, then the ConflictError surfaces with its code', async () => {
    await expect(
      guard.run('user-1', async (run) => {
        server.runs.get(run.id)!.status = 'FAILED'; // as if the server's idle timeout ended it
        return 1;
      }),
    ).rejects.toMatchObject({ name: 'ConflictError', status: 409, code: 'RUN_NOT_RUNNING' });
    await expect(
      guard.run('user-1', async (run) => {
        server.runs.get(run.id)!.status = 'FAILED';
      }),
    ).rejects.toBeInstanceOf(ConflictError);
  });

  it('when userId is empty, then it fails before any request', async () => {
    await expect(guard.run('', () => 1)).rejects.toBeInstanceOf(GuardError);
    expect(server.requests).toHaveLength(0);
  });
});

describe('run.modelCall and run.toolCall', () => {
  it('when a model call and a tool call succeed, then both steps are created and completed in order', async () => {
    const result = await guard.run('user-1', async (run) => {
      const reply = await run.modelCall(async () => 'hello', { model: 'gpt-4o-mini', inputData: { prompt: 'hi' } });
      return run.toolCall(() => `${reply} world`, { toolName: 'search', inputData: { q: reply } });
    });

    expect(result).toBe('hello world');
    const [model, tool] = server.onlyRun().steps;
    expect(model).toMatchObject({
      type: 'MODEL_CALL',
      sequence: 1,
      model: 'gpt-4o-mini',
      tool_name: null,
      input_data: { prompt: 'hi' },
      status: 'COMPLETED',
      prompt_tokens: null,
      completion_tokens: null,
    });
    expect(tool).toMatchObject({
      type: 'TOOL_CALL',
      sequence: 2,
      tool_name: 'search',
      input_data: { q: 'hello' },
      status: 'COMPLETED',
    });
    expect(model?.duration_ms).toEqual(expect.any(Number));
    // Without an extractor, no token fields are sent at all.
    const patches = server.requestsTo('PATCH', /\/steps\//);
    expect(patches[0]?.body).toEqual({ status: 'COMPLETED', duration_ms: expect.any(Number) });
    expect(patches[1]?.body).toEqual({ status: 'COMPLETED', duration_ms: expect.any(Number) });
  });

  it('when fn is synchronous, then its value is returned as is', async () => {
    const value = await guard.run('user-1', (run) => run.toolCall(() => 7, { toolName: 'calc' }));
    expect(value).toBe(7);
  });

  it('when fn takes time, then duration_ms measures it', async () => {
    await guard.run('user-1', (run) => run.toolCall(() => new Promise((r) => setTimeout(r, 60)), { toolName: 'slow' }));
    expect(server.onlyRun().steps[0]?.duration_ms).toBeGreaterThanOrEqual(50);
  });

  it('when fn throws, then the step is FAILED with its duration and the same error is re-thrown', async () => {
    const boom = new Error('tool broke');
    const caught = await guard
      .run('user-1', (run) =>
        run.toolCall(
          () => {
            throw boom;
          },
          { toolName: 'search' },
        ),
      )
      .catch((e: unknown) => e);

    expect(caught).toBe(boom);
    const run = server.onlyRun();
    expect(run.steps[0]).toMatchObject({ status: 'FAILED', duration_ms: expect.any(Number) });
    expect(run.status).toBe('FAILED');
  });

  it('when a step is denied, then fn is never executed and GuardBlockedError names the run and step', async () => {
    server.deniedModels.add('gpt-4o');
    let executed = false;
    const error = await guard
      .run('user-1', (run) =>
        run.modelCall(
          () => {
            executed = true;
          },
          { model: 'gpt-4o' },
        ),
      )
      .catch((e: unknown) => e);

    expect(executed).toBe(false);
    expect(error).toBeInstanceOf(GuardBlockedError);
    const run = server.onlyRun();
    const blocked = error as GuardBlockedError;
    expect(blocked.denyReason).toBe('USER_DAILY_BUDGET_EXCEEDED');
    expect(blocked.runId).toBe(run.id);
    expect(blocked.stepId).toBe(run.steps[0]?.id);
    expect(blocked.reason).toBe(
      `Model call "gpt-4o" (step 1) in run ${run.id} was blocked: the user's daily budget is spent (USER_DAILY_BUDGET_EXCEEDED).`,
    );
    // The BLOCKED step is an audit record and final: no PATCH.
    expect(run.steps[0]?.status).toBe('BLOCKED');
    expect(server.requestsTo('PATCH', /./)).toHaveLength(0);
    expect(run.status).toBe('FAILED');
  });

  it('when a denied step is caught inside the run, then the run can go on and complete', async () => {
    server.deniedTools.add('email');
    const value = await guard.run('user-1', async (run) => {
      await expect(run.toolCall(() => 'sent', { toolName: 'email' })).rejects.toBeInstanceOf(GuardBlockedError);
      return run.toolCall(() => 'found', { toolName: 'search' });
    });
    expect(value).toBe('found');
    expect(server.onlyRun().steps.map((s) => [s.sequence, s.status])).toEqual([
      [1, 'BLOCKED'],
      [2, 'COMPLETED'],
    ]);
    expect(server.onlyRun().status).toBe('COMPLETED');
  });

  it('when calls run concurrently in one run, then sequences are 1..N, unique, in call order', async () => {
    server.latencyMs = 5;
    const n = 12;
    const results = await guard.run('user-1', (run) =>
      Promise.all(
        Array.from({ length: n }, (_, i) =>
          i % 2 === 0 ? run.modelCall(async () => i, { model: 'm' }) : run.toolCall(() => i, { toolName: 't' }),
        ),
      ),
    );

    expect(results).toEqual(Array.from({ length: n }, (_, i) => i));
    const sent = server.requestsTo('POST', /\/steps$/).map((r) => (r.body as { sequence: number }).sequence);
    expect([...sent].sort((a, b) => a - b)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    const steps = server.onlyRun().steps;
    expect(steps.every((s) => s.status === 'COMPLETED')).toBe(true);
    // The i-th call got sequence i + 1: MODEL_CALL on odd sequences.
    for (const step of steps) expect(step.type).toBe(step.sequence % 2 === 1 ? 'MODEL_CALL' : 'TOOL_CALL');
  });

  it('when two runs interleave, then each numbers its own steps from 1', async () => {
    await Promise.all(
      ['a', 'b'].map((user) =>
        guard.run(user, async (run) => {
          await run.toolCall(() => 1, { toolName: 'x' });
          await run.toolCall(() => 2, { toolName: 'y' });
        }),
      ),
    );
    for (const run of server.runs.values()) expect(run.steps.map((s) => s.sequence)).toEqual([1, 2]);
  });

  it('when the handle is used after the run ended, then it refuses without a request', async () => {
    let leaked: Parameters<Parameters<GuardClient['run']>[1]>[0] | undefined;
    await guard.run('user-1', (run) => {
      leaked = run;
    });
    const before = server.requests.length;
    await expect(leaked!.toolCall(() => 1, { toolName: 'late' })).rejects.toThrow(/has ended/);
    expect(server.requests.length).toBe(before);
  });

  it('when model or toolName is missing, then the call fails without running fn', async () => {
    let ran = false;
    await guard.run('user-1', async (run) => {
      // @ts-expect-error: testing the runtime check for JavaScript callers
      await expect(
        run.modelCall(() => {
          ran = true;
        }, {}),
      ).rejects.toThrow(/options\.model/);
      // @ts-expect-error: idem
      await expect(
        run.toolCall(() => {
          ran = true;
        }, {}),
      ).rejects.toThrow(/toolName/);
    });
    expect(ran).toBe(false);
    expect(server.onlyRun().steps).toHaveLength(0);
  });
});

describe('guard.modelCall / guard.toolCall (AsyncLocalStorage)', () => {
  async function deepInTheAgent(guardClient: GuardClient): Promise<string> {
    await new Promise((r) => setTimeout(r, 1));
    const reply = await guardClient.modelCall(async () => 'thought', { model: 'gpt-4o-mini' });
    return guardClient.toolCall(() => `${reply}!`, { toolName: 'shout' });
  }

  it('when called anywhere inside guard.run, then the steps go to the current run', async () => {
    const value = await guard.run('user-1', async (run) => {
      expect(guard.currentRun).toBe(run);
      return deepInTheAgent(guard);
    });
    expect(value).toBe('thought!');
    expect(server.onlyRun().steps.map((s) => [s.sequence, s.type, s.status])).toEqual([
      [1, 'MODEL_CALL', 'COMPLETED'],
      [2, 'TOOL_CALL', 'COMPLETED'],
    ]);
  });

  it('when concurrent runs use guard.modelCall, then each step lands in its own run', async () => {
    await Promise.all(['a', 'b', 'c'].map((user) => guard.run(user, () => deepInTheAgent(guard))));
    expect(server.runs.size).toBe(3);
    for (const run of server.runs.values()) expect(run.steps.map((s) => s.sequence)).toEqual([1, 2]);
  });

  it('when called outside a run, then NoActiveRunError is thrown and nothing is sent', async () => {
    expect(guard.currentRun).toBeUndefined();
    await expect(guard.modelCall(() => 1, { model: 'm' })).rejects.toBeInstanceOf(NoActiveRunError);
    await expect(guard.toolCall(() => 1, { toolName: 't' })).rejects.toThrow(/outside guard\.run/);
    expect(server.requests).toHaveLength(0);
  });

  it('when a run has ended, then the context no longer carries it', async () => {
    await guard.run('user-1', () => 1);
    await expect(guard.toolCall(() => 1, { toolName: 't' })).rejects.toBeInstanceOf(NoActiveRunError);
  });

  it('when two clients are used, then each only sees its own runs', async () => {
    const other = new GuardClient({ apiKey: API_KEY, baseUrl: server.url });
    await guard.run('user-1', async () => {
      await expect(other.toolCall(() => 1, { toolName: 't' })).rejects.toBeInstanceOf(NoActiveRunError);
    });
    await other.close();
  });
});

describe('construction', () => {
  const valid = `lg_${'a1b2c3d4e5f6'}_${'A'.repeat(16)}_-${'z9'.repeat(8)}`;

  it.each([
    ['a valid key', valid],
    ['a long secret', `lg_abcdefghijkl_${'x'.repeat(64)}`],
  ])('when given %s, then it builds without a request', (_label, key) => {
    expect(() => new GuardClient({ apiKey: key })).not.toThrow();
  });

  it.each([
    ['missing', undefined, /no apiKey/],
    ['empty', '', /no apiKey/],
    ['not lg_', `sk_abcdefghijkl_${'x'.repeat(40)}`, /start with "lg_"/],
    ['uppercase prefix', `lg_ABCDEFGHIJKL_${'x'.repeat(40)}`, /prefix/],
    ['short prefix', `lg_abc_${'x'.repeat(40)}`, /prefix/],
    ['short secret', `lg_abcdefghijkl_${'x'.repeat(31)}`, /secret/],
    ['bad secret chars', `lg_abcdefghijkl_${'x'.repeat(31)}+/=`, /secret/],
    ['trailing newline', `lg_abcdefghijkl_${'x'.repeat(40)}\n`, /whitespace/],
  ])('when the key is %s, then it throws GuardConfigError at once', (_label, key, message) => {
    const build = (): GuardClient => new GuardClient({ apiKey: key as string });
    expect(build).toThrow(GuardConfigError);
    expect(build).toThrow(message);
  });

  it('when the key is malformed, then the message never contains the secret', () => {
    const secret = 'S3cr3t-that-must-not-leak'.repeat(2);
    for (const key of [`lg_ABCDEFGHIJKL_${secret}`, `lg_abcdefghijkl_${secret}!`, `xx_${secret}`]) {
      try {
        new GuardClient({ apiKey: key });
        expect.unreachable();
      } catch (error) {
        expect(String((error as Error).message)).not.toContain('S3cr3t');
      }
    }
  });

  it('when built, then defaults apply and the key is not visible on the instance', () => {
    const client = new GuardClient({ apiKey: valid });
    expect(client.baseUrl).toBe('http://127.0.0.1:8787');
    expect(client.timeoutMs).toBe(60_000);
    expect(client.maxRetries).toBe(2);
    expect(JSON.stringify(client)).not.toContain(valid);
    expect(Object.values(client)).not.toContain(valid);
  });

  it('when baseUrl has a trailing slash, then it is normalised', () => {
    expect(new GuardClient({ apiKey: valid, baseUrl: 'http://localhost:9999/' }).baseUrl).toBe('http://localhost:9999');
  });

  it.each([
    [{ baseUrl: 'not a url' }, /baseUrl/],
    [{ baseUrl: 'ftp://x' }, /http or https/],
    [{ timeoutMs: 0 }, /timeoutMs/],
    [{ maxRetries: -1 }, /maxRetries/],
    [{ maxRetries: 1.5 }, /maxRetries/],
  ])('when options are %o, then it throws GuardConfigError', (options, message) => {
    expect(() => new GuardClient({ apiKey: valid, ...options })).toThrow(message);
  });
});

describe('close()', () => {
  it('when closed, then later calls throw ClientClosedError without a request', async () => {
    await guard.close();
    await guard.close(); // idempotent
    await expect(guard.run('user-1', () => 1)).rejects.toBeInstanceOf(ClientClosedError);
    expect(server.requests).toHaveLength(0);
  });

  it('when closed during a request, then the in-flight request is aborted promptly', async () => {
    server.failNext(1, { kind: 'delay', ms: 2_000 });
    const started = Date.now();
    const pending = guard.run('user-1', () => 1);
    await new Promise((r) => setTimeout(r, 50));
    await guard.close();
    await expect(pending).rejects.toBeInstanceOf(ClientClosedError);
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it('when closed during a retry pause, then the pause ends at once', async () => {
    server.failNext(1, { kind: 'status', status: 503, headers: { 'retry-after': '30' } });
    const pending = guard.run('user-1', () => 1);
    await new Promise((r) => setTimeout(r, 100));
    const started = Date.now();
    await guard.close();
    await expect(pending).rejects.toBeInstanceOf(ClientClosedError);
    expect(Date.now() - started).toBeLessThan(500);
  });

  it("when closed inside a run, then the step fails and fn's error propagates", async () => {
    const error = await guard
      .run('user-1', async (run) => {
        await guard.close();
        return run.toolCall(() => 1, { toolName: 't' });
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ClientClosedError);
  });
});
