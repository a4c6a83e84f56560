/** A proxied call's target and upstream path, read from its request line and headers alone. */
import { describe, expect, it } from 'vitest';
import {
  segmentsBeforeUpstreamPath,
  targetResolver,
  upstreamPath,
  type TargetOptions,
  type TargetRequest,
} from '../../../src/proxy/call-target.js';
import { ProxyRefusal } from '../../../src/proxy/proxy-refusal.js';
import { ApiError } from '../../../src/errors.js';
import { systemClock } from '../../../src/clock.js';

const RUN_ID = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';

describe('segmentsBeforeUpstreamPath', () => {
  it.each([
    ['/proxy/runs/:run_id/:provider/*', 5],
    ['/proxy/t/:token/:provider/*', 5],
    ['/proxy/:provider/*', 3],
  ])('when the route is %s, then %i segments precede the upstream path', (pattern, skip) => {
    expect(segmentsBeforeUpstreamPath(pattern)).toBe(skip);
  });
});

describe('upstreamPath', () => {
  it.each([
    ['/proxy/openai/v1/chat/completions', 3, '/v1/chat/completions'],
    ['/proxy/openai/v1/models?limit=2&after=x', 3, '/v1/models?limit=2&after=x'],
    [`/proxy/runs/${RUN_ID}/openai/v1/chat/completions`, 5, '/v1/chat/completions'],
    ['/proxy/t/rg_pt_abc/anthropic/v1/messages', 5, '/v1/messages'],
    ['http://any.host:1234/proxy/openai/v1/chat/completions?x=1', 3, '/v1/chat/completions?x=1'],
    ['/proxy/openai/v1/a%20b', 3, '/v1/a%20b'],
    ['/proxy/openai/v1/%E0%A4%A', 3, '/v1/%E0%A4%A'],
  ])('when the URL is %s, then the upstream gets %s', (url, skip, expected) => {
    expect(upstreamPath(url, skip)).toBe(expected);
  });

  it.each([
    '/proxy/openai/../admin',
    '/proxy/openai/v1/%2e%2e/admin',
    '/proxy/openai/v1/./models',
    '/proxy/openai/v1/a%2Fb',
    '/proxy/openai/v1/a%5Cb',
  ])('when the URL %s climbs or hides a slash, then it is refused with BAD_PATH', (url) => {
    const refused = (() => {
      try {
        upstreamPath(url, 3);
      } catch (error) {
        return error;
      }
    })();
    expect(refused).toBeInstanceOf(ProxyRefusal);
    expect(refused).toMatchObject({ statusCode: 400, code: 'BAD_PATH' });
  });
});

describe('targetResolver', () => {
  const options = (overrides: Partial<TargetOptions> = {}): TargetOptions => ({
    keys: {
      verify: async (key) =>
        key === 'good-key' ? { workspaceId: 'ws-key', kind: 'key' as const, subjectId: 'k1' } : null,
    },
    clock: systemClock,
    tokens: {
      resolve: async (token) =>
        token === 'good-token' ? { workspaceId: 'ws-token', runId: RUN_ID, apiKeyId: 'k2' } : null,
    },
    defaultApiKey: null,
    defaultUserId: null,
    runStartedBy: async () => {
      throw new Error('an admin key never asks whose run it is');
    },
    ...overrides,
  });
  const request = (
    params: TargetRequest['params'],
    headers: Record<string, string> = {},
    remoteAddress = '10.0.0.7',
  ): TargetRequest => ({ params, headers, socket: { remoteAddress } });
  const codeOf = (promise: Promise<unknown>) =>
    promise.then(
      () => 'resolved',
      (error: unknown) => (error instanceof ApiError ? error.code : String(error)),
    );

  it('when a known token names the run, then its workspace and run are the target', async () => {
    const resolve = targetResolver(options());
    await expect(resolve(request({ token: 'good-token' }))).resolves.toEqual({
      workspaceId: 'ws-token',
      runId: RUN_ID,
      userId: null,
      via: 'token',
      apiKeyId: 'k2',
    });
  });

  it('when the token is unknown, then the call is unauthorized', async () => {
    expect(await codeOf(targetResolver(options())(request({ token: 'bad' })))).toBe('UNAUTHORIZED');
  });

  it('when a valid key names a run, then that run in the key workspace is the target', async () => {
    const target = await targetResolver(options())(request({ run_id: RUN_ID }, { 'x-runguard-key': 'good-key' }));
    expect(target).toEqual({ workspaceId: 'ws-key', runId: RUN_ID, userId: null, via: 'run', apiKeyId: 'k1' });
  });

  it("when an agent key names a run, then only a run it started is the target; another's is not found", async () => {
    const asked: string[][] = [];
    const resolve = targetResolver(
      options({
        keys: { verify: async () => ({ workspaceId: 'ws-key', kind: 'key', subjectId: 'agent-1', role: 'agent' }) },
        runStartedBy: async (workspaceId, runId, apiKeyId) => {
          asked.push([workspaceId, runId, apiKeyId]);
          return runId === RUN_ID;
        },
      }),
    );
    const headers = { 'x-runguard-key': 'agent-key' };
    await expect(resolve(request({ run_id: RUN_ID }, headers))).resolves.toMatchObject({ runId: RUN_ID, via: 'run' });
    const other = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c';
    expect(await codeOf(resolve(request({ run_id: other }, headers)))).toBe('RUN_NOT_FOUND');
    expect(asked).toEqual([
      ['ws-key', RUN_ID, 'agent-1'],
      ['ws-key', other, 'agent-1'],
    ]);
  });

  it('when the run id is not a UUID, then the run is not found', async () => {
    const resolve = targetResolver(options());
    expect(await codeOf(resolve(request({ run_id: 'nope' }, { 'x-runguard-key': 'good-key' })))).toBe('RUN_NOT_FOUND');
  });

  it('when no run is named, then the user header names the user of a run of its own', async () => {
    const target = await targetResolver(options())(
      request({}, { 'x-runguard-key': 'good-key', 'x-runguard-user-id': 'alice' }),
    );
    expect(target).toEqual({ workspaceId: 'ws-key', runId: null, userId: 'alice', via: 'auto', apiKeyId: 'k1' });
  });

  it('when no run and no user is given and no default user is set, then the call is a bad request', async () => {
    expect(await codeOf(targetResolver(options())(request({}, { 'x-runguard-key': 'good-key' })))).toBe('BAD_REQUEST');
    const tooLong = { 'x-runguard-key': 'good-key', 'x-runguard-user-id': 'u'.repeat(257) };
    expect(await codeOf(targetResolver(options())(request({}, tooLong)))).toBe('BAD_REQUEST');
  });

  it('when the default user is set, then a call without the user header is that user', async () => {
    const resolve = targetResolver(options({ defaultUserId: 'local' }));
    const target = await resolve(request({}, { 'x-runguard-key': 'good-key' }));
    expect(target.userId).toBe('local');
  });

  it('when no key is sent, then the default key stands in from loopback only', async () => {
    const resolve = targetResolver(options({ defaultApiKey: 'good-key', defaultUserId: 'local' }));
    await expect(resolve(request({}, {}, '127.0.0.1'))).resolves.toMatchObject({ workspaceId: 'ws-key' });
    await expect(resolve(request({}, {}, '::ffff:127.0.0.1'))).resolves.toMatchObject({ workspaceId: 'ws-key' });
    expect(await codeOf(resolve(request({}, {}, '10.0.0.7')))).toBe('UNAUTHORIZED');
  });

  it('when the key is wrong, then the call is unauthorized even from loopback with a default key', async () => {
    const resolve = targetResolver(options({ defaultApiKey: 'good-key', defaultUserId: 'local' }));
    expect(await codeOf(resolve(request({}, { 'x-runguard-key': 'wrong' }, '127.0.0.1')))).toBe('UNAUTHORIZED');
  });
});
