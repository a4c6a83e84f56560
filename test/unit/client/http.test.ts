import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  APIConnectionError,
  APIError,
  APITimeoutError,
  AuthenticationError,
  BadRequestError,
  ConflictError,
  GuardClient,
  GuardError,
  InternalServerError,
  NotFoundError,
  PayloadTooLargeError,
  PermissionDeniedError,
  RateLimitError,
  ValidationError,
} from '../../../clients/typescript/src/index.js';
import { API_KEY, FakeRunguard } from '../../client/fake-server.js';

let server: FakeRunguard;
const clients: GuardClient[] = [];

function client(options: Partial<ConstructorParameters<typeof GuardClient>[0]> = {}): GuardClient {
  const created = new GuardClient({ apiKey: API_KEY, baseUrl: server.url, ...options });
  clients.push(created);
  return created;
}

beforeEach(async () => {
  server = await new FakeRunguard().start();
});

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await server.stop();
});

describe('error classes', () => {
  it.each([
    [400, BadRequestError, 'INVALID_JSON'],
    [401, AuthenticationError, 'INVALID_API_KEY'],
    [403, PermissionDeniedError, 'PLAN_REQUIRED'],
    [404, NotFoundError, 'RUN_NOT_FOUND'],
    [409, ConflictError, 'RUN_NOT_RUNNING'],
    [413, PayloadTooLargeError, 'PAYLOAD_TOO_LARGE'],
    [422, ValidationError, 'VALIDATION_ERROR'],
    [429, RateLimitError, 'RATE_LIMITED'],
    [500, InternalServerError, 'INTERNAL'],
    [503, InternalServerError, 'UNAVAILABLE'],
    [418, APIError, 'TEAPOT'],
  ])(
    'when the server answers %i, then %o carries status, detail, code and request id',
    async (status, ErrorClass, code) => {
      server.failNext(1, {
        kind: 'status',
        status,
        body: { detail: 'It went wrong.', code },
        headers: { 'x-request-id': 'req_123' },
      });
      const error = await client({ maxRetries: 0 })
        .run('user-1', () => 1)
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(ErrorClass);
      expect(error).toBeInstanceOf(APIError);
      expect(error).toBeInstanceOf(GuardError);
      expect(error).toMatchObject({
        name: ErrorClass.name,
        status,
        detail: 'It went wrong.',
        code,
        requestId: 'req_123',
        message: `${status} ${code}: It went wrong.`,
      });
    },
  );

  it('when the server answers 422, then the field errors are exposed', async () => {
    const errors = [{ path: 'body.user_id', message: 'is required' }];
    server.failNext(1, {
      kind: 'status',
      status: 422,
      body: { detail: 'Invalid body.', code: 'VALIDATION_ERROR', errors },
    });
    await expect(client().run('user-1', () => 1)).rejects.toMatchObject({ errors });
  });

  it('when the key is wrong, then the real server path answers 401 AuthenticationError, not retried', async () => {
    const wrong = `lg_zzzzzzzzzzzz_${'w'.repeat(40)}`;
    await expect(client({ apiKey: wrong }).run('user-1', () => 1)).rejects.toBeInstanceOf(AuthenticationError);
    expect(server.requests).toHaveLength(1);
  });

  it('when the error body is not JSON, then the text becomes the detail', async () => {
    server.failNext(1, { kind: 'status', status: 502, raw: 'Bad Gateway from nginx' });
    const error = await client({ maxRetries: 0 })
      .run('user-1', () => 1)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InternalServerError);
    expect(error).toMatchObject({ status: 502, detail: 'Bad Gateway from nginx', code: undefined });
  });

  it('when nothing listens, then APIConnectionError is thrown after the retries', async () => {
    const port = Number(new URL(server.url).port);
    await server.stop();
    const error = await client({ baseUrl: `http://127.0.0.1:${port}`, maxRetries: 0 })
      .run('u', () => 1)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(APIConnectionError);
    expect(error).not.toBeInstanceOf(APITimeoutError);
    server = await new FakeRunguard().start(); // for afterEach
  });
});

describe('retries and idempotency', () => {
  it('when the server answers 503 twice, then the call is retried with the same Idempotency-Key and succeeds', async () => {
    server.failNext(2, { kind: 'status', status: 503, headers: { 'retry-after': '0' } });
    const value = await client().run('user-1', () => 'ok');

    expect(value).toBe('ok');
    const starts = server.requestsTo('POST', /^\/v1\/runs\/$/);
    expect(starts).toHaveLength(3);
    const keys = new Set(starts.map((r) => r.idempotencyKey));
    expect(keys.size).toBe(1);
    expect([...keys][0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(starts.map((r) => r.headers['x-runguard-retry-count'])).toEqual(['0', '1', '2']);
    expect(server.runs.size).toBe(1);
  });

  it('when every attempt fails, then maxRetries + 1 attempts are made and the last error thrown', async () => {
    server.failNext(3, { kind: 'status', status: 500, headers: { 'retry-after': '0' } });
    await expect(client({ maxRetries: 2 }).run('user-1', () => 1)).rejects.toBeInstanceOf(InternalServerError);
    expect(server.requests).toHaveLength(3);
  });

  it('when the server answers 408 or 429, then the call is retried', async () => {
    server.failNext(1, { kind: 'status', status: 408, headers: { 'retry-after': '0' } });
    server.failNext(1, { kind: 'status', status: 429, headers: { 'retry-after': '0' } });
    await expect(client().run('user-1', () => 1)).resolves.toBe(1);
    expect(server.requestsTo('POST', /^\/v1\/runs\/$/)).toHaveLength(3);
  });

  it.each([400, 401, 403, 404, 409, 413, 422])(
    'when the server answers %i, then the call is not retried',
    async (status) => {
      server.failNext(1, { kind: 'status', status, headers: { 'retry-after': '0' } });
      await expect(client().run('user-1', () => 1)).rejects.toMatchObject({ status });
      expect(server.requests).toHaveLength(1);
    },
  );

  it('when the connection drops before the request is processed, then it is retried with the same key', async () => {
    server.failNext(1, { kind: 'drop' });
    await expect(client().run('user-1', () => 1)).resolves.toBe(1);
    const starts = server.requestsTo('POST', /^\/v1\/runs\/$/);
    expect(starts).toHaveLength(2);
    expect(starts[0]?.idempotencyKey).toBe(starts[1]?.idempotencyKey);
    expect(server.runs.size).toBe(1);
  });

  it('when the answer to a run start is lost, then the retry is replayed and the run counts once', async () => {
    server.failNext(1, { kind: 'drop-after-processing' });
    await expect(client().run('user-1', () => 1)).resolves.toBe(1);
    expect(server.requestsTo('POST', /^\/v1\/runs\/$/)).toHaveLength(2);
    expect(server.runs.size).toBe(1);
    expect(server.onlyRun().status).toBe('COMPLETED');
  });

  it('when the answer to a step creation is lost, then the step is not created twice', async () => {
    const guard = client();
    await guard.run('user-1', async (run) => {
      server.failNext(1, { kind: 'drop-after-processing' });
      await run.toolCall(() => 1, { toolName: 'search' });
    });
    const creations = server.requestsTo('POST', /\/steps$/);
    expect(creations).toHaveLength(2);
    expect(creations[0]?.idempotencyKey).toBe(creations[1]?.idempotencyKey);
    expect(server.onlyRun().steps).toHaveLength(1);
    expect(server.onlyRun().steps[0]?.status).toBe('COMPLETED');
  });

  it('when the answer to a step update is lost, then the retry does not hit STEP_ALREADY_FINISHED', async () => {
    await client().run('user-1', async (run) => {
      await run.modelCall(
        async () => {
          server.failNext(1, { kind: 'drop-after-processing' });
          return 'x';
        },
        { model: 'm' },
      );
    });
    const patches = server.requestsTo('PATCH', /\/steps\//);
    expect(patches).toHaveLength(2);
    expect(patches[0]?.idempotencyKey).toBe(patches[1]?.idempotencyKey);
    expect(server.onlyRun().status).toBe('COMPLETED');
  });

  it('when two logical calls are made, then each gets its own key, on every POST and PATCH', async () => {
    await client().run('user-1', async (run) => {
      await run.toolCall(() => 1, { toolName: 'a' });
      await run.toolCall(() => 2, { toolName: 'b' });
    });
    const keys = server.requests.map((r) => r.idempotencyKey);
    expect(keys).toHaveLength(6); // start, 2 x (create, update), end
    expect(keys.every((k) => typeof k === 'string')).toBe(true);
    expect(new Set(keys).size).toBe(6);
  });

  it('when Retry-After says 1 second, then the client waits about that long', async () => {
    server.failNext(1, { kind: 'status', status: 429, headers: { 'retry-after': '1' } });
    const started = Date.now();
    await client().run('user-1', () => 1);
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
  });

  it('when retry-after-ms is given, then it wins over the default backoff', async () => {
    server.failNext(2, { kind: 'status', status: 503, headers: { 'retry-after-ms': '20' } });
    const started = Date.now();
    await client().run('user-1', () => 1);
    // Default backoff would be at least 0.375 s + 0.75 s.
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it('when an attempt times out, then APITimeoutError is thrown', async () => {
    server.failNext(1, { kind: 'delay', ms: 1_000 });
    const started = Date.now();
    const error = await client({ timeoutMs: 100, maxRetries: 0 })
      .run('user-1', () => 1)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(APITimeoutError);
    expect(error).toBeInstanceOf(APIConnectionError);
    expect(Date.now() - started).toBeLessThan(900);
  });

  it('when the first attempt times out, then the retry carries the same key and succeeds', async () => {
    server.failNext(1, { kind: 'delay', ms: 600 });
    await expect(client({ timeoutMs: 300, maxRetries: 1 }).run('user-1', () => 1)).resolves.toBe(1);
    const starts = server.requestsTo('POST', /^\/v1\/runs\/$/);
    expect(starts).toHaveLength(2);
    expect(starts[0]?.idempotencyKey).toBe(starts[1]?.idempotencyKey);
  });
});

describe('custom fetch', () => {
  it('when a fetch is given, then every request goes through it', async () => {
    const seen: string[] = [];
    const spy: typeof fetch = (input, init) => {
      seen.push(`${init?.method} ${String(input)}`);
      return fetch(input, init);
    };
    await client({ fetch: spy }).run('user-1', () => 1);
    expect(seen).toEqual([`POST ${server.url}/v1/runs/`, expect.stringMatching(/^POST .*\/end$/)]);
  });
});
