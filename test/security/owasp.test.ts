/**
 * The OWASP API Security Top 10 (2023), walked through this API: one `describe` per item, each
 * test able to fail. Where an item is already covered elsewhere the test here adds what is
 * missing, and names the existing test in a comment. Real HTTP on Postgres and Redis, a fake
 * provider for the proxy, a hostile one, and an "evil" server that must never hear from us.
 */
import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { buildApp } from '../../src/api/app.js';
import { createLogger } from '../../src/logger.js';
import type { Db } from '../../src/store/db.js';
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { caller, startTestApi, TEST_AUTH, type Caller, type TestApi } from '../support/harness.js';

/** Every scrypt the daemon runs, with its cost: login must run one whatever the email (API2). */
const scryptCalls = vi.hoisted(() => [] as { N: number | undefined }[]);
vi.mock('node:crypto', async (importOriginal) => {
  const crypto = await importOriginal<typeof import('node:crypto')>();
  const scrypt = ((...args: unknown[]) => {
    const options = args.length === 5 ? (args[3] as { N?: number }) : undefined;
    scryptCalls.push({ N: options?.N });
    return (crypto.scrypt as (...a: unknown[]) => void)(...args);
  }) as typeof crypto.scrypt;
  return { ...crypto, scrypt, default: { ...crypto, scrypt } };
});

const PROVIDER_KEY = 'sk-provider-owasp-0123456789abcdef';
const PASSWORD = 'owasp password 0123';
const chat = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] };

// --- Servers ------------------------------------------------------------------------------------

interface Recorder {
  url: string;
  port: number;
  requests: { method: string; path: string; headers: IncomingHttpHeaders; body: string }[];
  close(): Promise<void>;
}

/** A server that records what it receives and answers with `respond` (default: 200 `{}`). */
async function recordingServer(
  respond: (
    req: { method: string; path: string; headers: IncomingHttpHeaders; body: string },
    res: import('node:http').ServerResponse,
  ) => void = (_req, res) => res.end('{}'),
): Promise<Recorder> {
  const requests: Recorder['requests'] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const seen = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body };
      requests.push(seen);
      res.on('error', () => {});
      respond(seen, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const MiB = 1024 * 1024;
const sse = (events: unknown[]) =>
  events.map((e) => `data: ${typeof e === 'string' ? e : JSON.stringify(e)}\n\n`).join('');

/**
 * A provider that misbehaves on request: the mode is the `x-hostile` request header (forwarded
 * upstream like any header of the client's).
 */
function hostileAnswer(evilUrl: string) {
  return (req: { path: string; headers: IncomingHttpHeaders }, res: import('node:http').ServerResponse) => {
    const mode = String(req.headers['x-hostile'] ?? '');
    const json = (body: string, headers: Record<string, string | string[]> = {}) => {
      res.writeHead(200, { 'content-type': 'application/json', ...headers });
      res.end(body);
    };
    const usage = (u: unknown) => JSON.stringify({ id: 'x', object: 'chat.completion', choices: [], usage: u });
    switch (mode) {
      case 'redirect-302':
      case 'redirect-307':
      case 'redirect-308':
        res.writeHead(Number(mode.slice(-3)), { location: `${evilUrl}/stolen`, 'content-type': 'application/json' });
        res.end('{"moved":true}');
        return;
      case 'headers':
        json('{"ok":true}', {
          'set-cookie': ['session=provider; Path=/; HttpOnly', 'other=1'],
          connection: 'x-hop-by-name',
          'x-hop-by-name': 'secret',
          'proxy-authenticate': 'Basic realm="provider"',
          'x-provider-header': 'kept',
        });
        return;
      case 'invalid-json':
        json('{"usage": {"prompt_tokens": 5, "completion_tokens": ');
        return;
      case 'negative':
        json(usage({ prompt_tokens: -5, completion_tokens: 1.5, prompt_tokens_details: { cached_tokens: -1 } }));
        return;
      case 'strings':
        json(usage({ prompt_tokens: '7', completion_tokens: null, prompt_tokens_details: 'x' }));
        return;
      case 'absurd':
        json(
          usage({
            prompt_tokens: 1e300,
            completion_tokens: Number.MAX_SAFE_INTEGER,
            prompt_tokens_details: { cached_tokens: 2 ** 60 },
          }),
        );
        return;
      case 'largest':
        // The largest counts the API itself accepts: at the largest price they overflow a bigint of microdollars.
        json(usage({ prompt_tokens: 1e12, completion_tokens: 1e12 }));
        return;
      case 'huge-sse': {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const huge = JSON.stringify({
          choices: [{ delta: { content: 'x'.repeat(5 * MiB) } }],
          usage: { prompt_tokens: 999 },
        });
        res.write(`data: ${huge}\n\n`);
        res.end(sse([{ choices: [], usage: { prompt_tokens: 11, completion_tokens: 3 } }, '[DONE]']));
        return;
      }
      case 'sse-garbage':
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(
          sse([
            '{"usage": {"prompt_tokens": 4', // cut JSON
            { usage: { prompt_tokens: -1, completion_tokens: -2 } },
            { usage: { prompt_tokens: 1e13, completion_tokens: 2 ** 64 } },
            { usage: 'lots' },
            '[DONE]',
          ]) + 'data: {"usage": {"prompt_tokens": 12345',
        ); // and an unterminated last event
        return;
      case 'anthropic-absurd':
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.end(
          `event: message_start\n${sse([{ type: 'message_start', message: { usage: { input_tokens: -3, output_tokens: 1e30 } } }])}` +
            `event: message_delta\n${sse([{ type: 'message_delta', usage: { output_tokens: '9' } }])}`,
        );
        return;
      default:
        json(usage({ prompt_tokens: 1, completion_tokens: 1 }));
    }
  };
}

/** Sends bytes as written on a fresh socket; resolves with what came back (the status line first). */
function rawRequest(url: string, text: string): Promise<string> {
  const { port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), '127.0.0.1', () => socket.write(text));
    let out = '';
    const timer = setTimeout(() => socket.destroy(), 3_000);
    socket.on('data', (d) => (out += d));
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(out);
    });
    socket.on('error', () => {});
  });
}

/** A request through node:http, which (unlike fetch) lets us set any header and never follows a redirect. */
function nodeRequest(
  url: string,
  options: { method?: string; headers?: Record<string, string | string[]>; body?: string },
): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: options.method ?? 'POST', headers: options.headers }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

// --- The app under test -------------------------------------------------------------------------

let upstream: FakeUpstream;
let evil: Recorder;
let hostile: Recorder;
let api: TestApi;
const logLines: string[] = [];
let seq = 0;

beforeAll(async () => {
  upstream = await startFakeUpstream();
  evil = await recordingServer();
  hostile = await recordingServer(hostileAnswer(evil.url));
  const sink = new Writable({
    write(chunk, _enc, done) {
      logLines.push(String(chunk));
      done();
    },
  });
  api = await startTestApi('postgres+redis', {
    logger: createLogger('debug', sink),
    proxy: {
      upstream: upstream.url,
      providers: [
        { name: 'hostile', type: 'openai', upstream: hostile.url },
        { name: 'hostile-anthropic', type: 'anthropic', upstream: hostile.url },
      ],
    },
  });
});
afterAll(async () => {
  await api?.close();
  await Promise.all([upstream?.close(), evil?.close(), hostile?.close()]);
});

const anonymous = () => caller(api.url, null);
const as = (credential: string): Caller => caller(api.url, credential);

/** A fresh account with its basic workspace: key, token and callers for both. */
async function register() {
  const email = `owasp${++seq}-${Date.now()}@example.com`;
  const res = await anonymous().request('POST', '/v1/auth/register', { email, password: PASSWORD });
  expect(res.status).toBe(201);
  return {
    email,
    workspaceId: res.body.workspace.id as string,
    apiKey: res.body.api_key as string,
    token: res.body.access_token as string,
    key: as(res.body.api_key),
    jwt: as(res.body.access_token),
  };
}

async function startRun(who: Caller = api, userId = 'agent'): Promise<string> {
  const res = await who.request('POST', '/v1/runs', { user_id: userId });
  expect(res.body.status).toBe('RUNNING');
  return res.body.id;
}

/** The proxy records after the answer is delivered: wait until the run's steps are all finished. */
async function settled(runId: string, who: Caller = api, steps = 1): Promise<any> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const run = (await who.request('GET', `/v1/runs/${runId}`)).body;
    if (run.steps.length >= steps && run.steps.every((s: any) => s.status !== 'ALLOWED')) return run;
    if (Date.now() > deadline) throw new Error(`run ${runId} did not settle: ${JSON.stringify(run.steps)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const sentTo = (server: { requests: unknown[] }) => server.requests.length;

/** The secret part of `lg_<12-char prefix>_<secret>` (the secret is base64url: it may hold `_`). */
const keySecret = (apiKey: string) => apiKey.slice('lg_'.length + 12 + 1);

// --- API1 -----------------------------------------------------------------------------------------

describe('API1:2023 Broken Object Level Authorization', () => {
  // Also: test/api/admin.test.ts "isolation" (runs, steps, pricing, users, keys of two workspaces),
  // test/proxy/proxy.test.ts (another workspace's key on a run URL), and the "trespass" operation
  // of test/security/properties.test.ts.
  it("when a workspace names another workspace's run, step or run URL, then 404 exactly as for an id that does not exist", async () => {
    const a = await register();
    const b = await register();
    const runA = await startRun(a.key);
    const otherRunA = await startRun(a.key);
    const stepA = (await a.key.request('POST', `/v1/runs/${runA}/steps`, { type: 'INPUT', sequence: 1 })).body.id;
    const runB = await startRun(b.key);
    const nobody = '00000000-0000-4000-8000-000000000000';
    const before = sentTo(upstream);

    const attempts: [Caller, string, string, unknown?][] = [
      [b.key, 'GET', `/v1/runs/${runA}`],
      [b.jwt, 'GET', `/v1/runs/${runA}`],
      [b.key, 'POST', `/v1/runs/${runA}/end`, { status: 'FAILED' }],
      [b.key, 'POST', `/v1/runs/${runA}/steps`, { type: 'INPUT', sequence: 2 }],
      [b.key, 'PATCH', `/v1/runs/${runA}/steps/${stepA}`, { status: 'FAILED' }],
      // A step of another workspace under a run of one's own, and a step under the wrong run.
      [b.key, 'PATCH', `/v1/runs/${runB}/steps/${stepA}`, { status: 'FAILED' }],
      [a.key, 'PATCH', `/v1/runs/${otherRunA}/steps/${stepA}`, { status: 'FAILED' }],
      [b.key, 'POST', `/v1/runs/${runA}/proxy-token`],
    ];
    for (const [who, method, path, body] of attempts) {
      const res = await who.request(method, path, body);
      const unknown = await who.request(method, path.replace(runA, nobody).replace(stepA, nobody), body);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body, `${method} ${path}`).toEqual(unknown.body);
      expect(JSON.stringify(res.body)).not.toContain(runA);
    }
    // The proxy's run URL: 404 in the provider's format, and nothing goes upstream.
    const proxied = await fetch(`${api.url}/proxy/runs/${runA}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'x-runguard-key': b.apiKey,
        'content-type': 'application/json',
        authorization: `Bearer ${PROVIDER_KEY}`,
      },
      body: JSON.stringify(chat),
    });
    expect(proxied.status).toBe(404);
    expect(await proxied.json()).toMatchObject({ error: { code: 'RUN_NOT_FOUND' } });
    expect(sentTo(upstream)).toBe(before);

    // Nothing of a's changed: its run still RUNNING with its one step still ALLOWED.
    const run = (await a.key.request('GET', `/v1/runs/${runA}`)).body;
    expect(run).toMatchObject({ status: 'RUNNING', step_count: 1, steps: [{ id: stepA, status: 'ALLOWED' }] });
  });

  it("when a workspace writes a user id another workspace uses, then it gets a user of its own and the other's is untouched", async () => {
    const a = await register();
    const b = await register();
    await a.key.request('PUT', '/v1/users/alice', { daily_budget_usd: 5 });
    await startRun(a.key, 'alice');
    expect((await b.key.request('GET', '/v1/users')).body).toMatchObject({ items: [], total: 0 });
    const bs = await b.key.request('PUT', '/v1/users/alice', { blocked: true });
    expect(bs.status).toBe(200);
    expect(bs.body).toMatchObject({ user_id: 'alice', blocked: true, daily_budget_usd: null, run_count: 0 });
    const usersOfA = (await a.key.request('GET', '/v1/users')).body.items;
    expect(usersOfA).toEqual([
      expect.objectContaining({ user_id: 'alice', blocked: false, daily_budget_usd: 5, run_count: 1 }),
    ]);
    expect((await a.key.request('POST', '/v1/runs', { user_id: 'alice' })).body.status).toBe('RUNNING');
  });

  it("when two workspaces send the same Idempotency-Key, then neither gets the other's answer", async () => {
    const a = await register();
    const b = await register();
    const headers = { 'idempotency-key': 'same-key-everywhere' };
    const first = await a.key.request('POST', '/v1/runs', { user_id: 'u' }, headers);
    const second = await b.key.request('POST', '/v1/runs', { user_id: 'u' }, headers);
    expect([first.status, second.status]).toEqual([201, 201]);
    expect(second.body.id).not.toBe(first.body.id);
    expect((await b.key.request('GET', `/v1/runs/${first.body.id}`)).status).toBe(404);
    // Within one workspace the key does replay.
    expect((await a.key.request('POST', '/v1/runs', { user_id: 'u' }, headers)).body.id).toBe(first.body.id);
  });
});

// --- API2 -----------------------------------------------------------------------------------------

describe('API2:2023 Broken Authentication', () => {
  // Also: test/api/admin.test.ts "when a token is tampered, expired, unsigned or signed with another
  // key, then 401", "when the password changes, then earlier tokens stop working", "when keys are
  // listed ... when regenerated, then every earlier key stops at once"; test/api/hardening.test.ts
  // "when login is hammered from one address, then it is rate limited with 429".
  it('when a key is regenerated, then the earlier key is refused everywhere at once: API, proxy header, proxy-token mint', async () => {
    const r = await register();
    const runId = await startRun(r.key);
    const fresh = await r.key.request('POST', '/v1/api-keys/regenerate');
    expect(fresh.status).toBe(201);
    const before = sentTo(upstream);
    expect((await r.key.request('GET', '/v1/workspace')).status).toBe(401);
    expect((await r.key.request('POST', `/v1/runs/${runId}/proxy-token`)).status).toBe(401);
    const proxied = await fetch(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-runguard-key': r.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify(chat),
    });
    expect(proxied.status).toBe(401);
    expect(sentTo(upstream)).toBe(before);
    expect((await as(fresh.body.api_key).request('POST', `/v1/runs/${runId}/proxy-token`)).status).toBe(201);
  });

  it('when login fails, then an unknown email and a wrong password both run one scrypt of the configured cost', async () => {
    // Structural, not a stopwatch: the unknown-email path verifies against a decoy hash, so both
    // failures cost the same work and take the same time (a timing oracle needs one of them cheap).
    const r = await register();
    const attempt = async (email: string, password: string) => {
      scryptCalls.length = 0;
      const res = await anonymous().request('POST', '/v1/auth/login', { email, password });
      return { res, calls: [...scryptCalls] };
    };
    const wrong = await attempt(r.email, 'not the password');
    const unknown = await attempt(`nobody-${r.email}`, 'not the password');
    const right = await attempt(r.email, PASSWORD);
    expect([wrong.res.status, unknown.res.status, right.res.status]).toEqual([401, 401, 200]);
    expect(unknown.res.body).toEqual(wrong.res.body);
    for (const { calls } of [wrong, unknown, right]) expect(calls).toEqual([{ N: TEST_AUTH.scryptCost }]);
  });

  it('when credentials are malformed, of the wrong shape, or signed with another algorithm, then 401 and never a 5xx', async () => {
    const r = await register();
    const [, payload] = r.token.split('.');
    const claims = JSON.parse(Buffer.from(payload!, 'base64url').toString());
    const { SignJWT } = await import('jose');
    const secret = new TextEncoder().encode(TEST_AUTH.jwtSecret);
    // The right secret, another algorithm: the algorithm is pinned to HS256.
    const hs512 = await new SignJWT({ ws: claims.ws, tv: claims.tv })
      .setProtectedHeader({ alg: 'HS512' })
      .setSubject(claims.sub)
      .setIssuedAt()
      .setExpirationTime('1h')
      .sign(secret);
    const [, prefix] = r.apiKey.split('_');
    const wrongSecret = `lg_${prefix}_${'A'.repeat(43)}`;
    const headers = [
      `Bearer ${wrongSecret}`,
      `Basic ${Buffer.from(`${r.email}:${PASSWORD}`).toString('base64')}`,
      `Bearer ${r.apiKey} extra`,
      `Bearer ${hs512}`,
      'Bearer',
      'Bearer lg_',
      `Bearer lg_${prefix}_`,
      `Bearer ${'x'.repeat(8_000)}`,
      `Token ${r.apiKey}`,
    ];
    for (const authorization of headers) {
      const res = await anonymous().request('GET', '/v1/workspace', undefined, { authorization });
      expect(res.status, authorization.slice(0, 40)).toBe(401);
      expect(res.body.code).toBe('UNAUTHORIZED');
    }
  });
});

// --- API3 -----------------------------------------------------------------------------------------

describe('API3:2023 Broken Object Property Level Authorization', () => {
  // Also: test/security/bad-input.test.ts "when bodies have wrong types, unknown or missing fields,
  // then 422 on every write endpoint" (adds `is_admin` and `workspace_id` to every write). Here:
  // each write is offered the properties a caller would most like to set and must not.
  it('when a write carries a property it does not accept (workspace_id, plan, kill_switch_active, status, cost_usd, decision ...), then 422 and nothing changes', async () => {
    const r = await register();
    const other = await register();
    const runId = await startRun(r.key);
    const stepId = (
      await r.key.request('POST', `/v1/runs/${runId}/steps`, { type: 'MODEL_CALL', sequence: 1, model: 'm' })
    ).body.id;
    const decision = { outcome: 'ALLOW', reason: null, evaluated_rules: {} };
    const writes: [Caller, string, string, Record<string, unknown>, Record<string, unknown>][] = [
      [
        r.key,
        'POST',
        '/v1/runs',
        { user_id: 'u' },
        { workspace_id: other.workspaceId, status: 'COMPLETED', decision, id: runId },
      ],
      [
        r.key,
        'POST',
        `/v1/runs/${runId}/steps`,
        { type: 'INPUT', sequence: 9 },
        { status: 'COMPLETED', decision, cost_usd: 0, workspace_id: other.workspaceId, run_id: runId },
      ],
      [
        r.key,
        'PATCH',
        `/v1/runs/${runId}/steps/${stepId}`,
        { status: 'COMPLETED', prompt_tokens: 1 },
        { cost_usd: 0, decision, sequence: 2, model: 'free-model', status_override: 'ALLOWED' },
      ],
      [
        r.key,
        'POST',
        `/v1/runs/${runId}/end`,
        { status: 'COMPLETED' },
        { ended_at: '2000-01-01T00:00:00Z', decision, total_cost_usd: 0 },
      ],
      [
        r.key,
        'PUT',
        '/v1/model-pricing/m',
        { input_cost_per_token: 1, output_cost_per_token: 1 },
        { workspace_id: other.workspaceId, id: runId },
      ],
      [
        r.key,
        'PATCH',
        '/v1/workspace',
        { name: 'n' },
        { plan: 'enterprise', kill_switch_active: true, workspace_id: other.workspaceId, id: other.workspaceId },
      ],
      [
        r.key,
        'POST',
        '/v1/workspace/kill-switch',
        { active: false },
        { plan: 'enterprise', workspace_id: other.workspaceId },
      ],
      [
        r.key,
        'PUT',
        '/v1/users/u',
        { blocked: false },
        { run_count: 0, daily_spend_usd: 0, workspace_id: other.workspaceId },
      ],
      [
        r.jwt,
        'POST',
        '/v1/billing/plan',
        { plan: 'basic' },
        { kill_switch_active: true, monthly_run_limit: null, max_concurrent_runs: null },
      ],
      [
        anonymous(),
        'POST',
        '/v1/auth/register',
        { email: `m${seq}@example.com`, password: PASSWORD },
        { plan: 'enterprise', workspace_id: other.workspaceId, kill_switch_active: true },
      ],
      [
        anonymous(),
        'POST',
        '/v1/auth/login',
        { email: r.email, password: PASSWORD },
        { workspace_id: other.workspaceId },
      ],
      [
        r.jwt,
        'POST',
        '/v1/auth/password',
        { current_password: PASSWORD, new_password: 'another password 1' },
        { token_version: 1, email: 'x@example.com' },
      ],
      // Writes that take no body at all: a field is refused all the same, never silently ignored.
      [r.key, 'POST', '/v1/api-keys/regenerate', {}, { workspace_id: other.workspaceId, name: 'mine' }],
      [
        r.key,
        'POST',
        `/v1/runs/${runId}/proxy-token`,
        {},
        { workspace_id: other.workspaceId, run_id: runId, expires_at: null },
      ],
    ];
    const snapshot = async () => {
      const { rows } = await api.stores.db.query(
        `SELECT (SELECT row_to_json(w) FROM workspaces w WHERE id = $1) AS ws, (SELECT row_to_json(w) FROM workspaces w WHERE id = $2) AS other,
          (SELECT count(*)::int FROM runs WHERE workspace_id IN ($1, $2)) AS runs, (SELECT count(*)::int FROM steps WHERE workspace_id IN ($1, $2)) AS steps,
          (SELECT count(*)::int FROM api_keys WHERE workspace_id IN ($1, $2)) AS keys, (SELECT count(*)::int FROM proxy_tokens WHERE workspace_id IN ($1, $2)) AS tokens,
          (SELECT count(*)::int FROM accounts) AS accounts, (SELECT string_agg(password_hash || token_version, ',') FROM accounts WHERE workspace_id = $1) AS creds,
          (SELECT count(*)::int FROM model_pricing WHERE workspace_id IN ($1, $2)) AS pricing, (SELECT count(*)::int FROM sdk_users WHERE workspace_id IN ($1, $2)) AS users,
          (SELECT string_agg(status, ',' ORDER BY id) FROM steps WHERE workspace_id = $1) AS step_statuses`,
        [r.workspaceId, other.workspaceId],
      );
      return rows[0];
    };
    const before = await snapshot();
    for (const [who, method, path, valid, forbidden] of writes) {
      for (const [field, value] of Object.entries(forbidden)) {
        const res = await who.request(method, path, { ...valid, [field]: value });
        expect(res.status, `${method} ${path} ${field}`).toBe(422);
        expect(res.body.errors, `${method} ${path} ${field}`).toContainEqual({
          path: `body.${field}`,
          message: 'is not a known field',
        });
      }
    }
    expect(await snapshot()).toEqual(before);
    // The same writes without the extra property do work: the refusals above were about the property.
    expect((await r.key.request('POST', '/v1/api-keys/regenerate', {})).status).toBe(201);
  });

  it('when objects are read, then no answer carries a hash, a salt, a token version or another secret', async () => {
    const r = await register();
    const runId = await startRun(r.key);
    await r.key.request('POST', `/v1/runs/${runId}/proxy-token`);
    const reads = await Promise.all([
      r.jwt.request('GET', '/v1/auth/me'),
      r.jwt.request('GET', '/v1/api-keys'),
      r.key.request('GET', '/v1/workspace'),
      r.key.request('GET', `/v1/runs/${runId}`),
      r.key.request('GET', '/v1/runs'),
      r.jwt.request('GET', '/v1/billing'),
      r.key.request('GET', '/v1/users'),
      r.key.request('GET', '/v1/usage'),
    ]);
    for (const res of reads) {
      expect(res.status).toBe(200);
      const text = JSON.stringify(res.body);
      for (const leak of [
        'password',
        'scrypt$',
        'secret',
        'sha256',
        'token_version',
        '"tv"',
        keySecret(r.apiKey),
        'rgp_',
      ]) {
        expect(text).not.toContain(leak);
      }
    }
  });
});

// --- API4 -----------------------------------------------------------------------------------------

describe('API4:2023 Unrestricted Resource Consumption', () => {
  // Also: test/security/bad-input.test.ts "when JSON is broken, huge, deeply nested ..." (413 and the
  // JSON depth limit on /v1/runs), test/api/hardening.test.ts (login rate limit), test/proxy/proxy.test.ts
  // "when the body is over the proxy limit ..." (embedded store).
  it('when a body is over the limit on any write, then 413 before anything is stored', async () => {
    const big = 'x'.repeat(1.5 * MiB);
    for (const [method, path, body] of [
      ['PUT', '/v1/users/big', { blocked: true, pad: big }],
      ['PATCH', '/v1/workspace', { name: big }],
      ['PUT', '/v1/model-pricing/big', { input_cost_per_token: 0, output_cost_per_token: 0, pad: big }],
    ] as const) {
      const res = await api.request(method, path, body);
      expect(res.status, path).toBe(413);
      expect(res.body).toMatchObject({ code: 'PAYLOAD_TOO_LARGE' });
    }
    expect((await api.request('GET', '/v1/users')).body.items.map((u: any) => u.user_id)).not.toContain('big');
  });

  it('when a page is asked for beyond the bounds (per_page > 100, < 1, page < 1, days > 366), then 422', async () => {
    for (const query of [
      '/v1/runs?per_page=101',
      '/v1/runs?per_page=0',
      '/v1/runs?page=0',
      '/v1/users?per_page=101',
      '/v1/users?per_page=1000000',
      '/v1/users?page=0',
      '/v1/usage?days=367',
      '/v1/usage?days=0',
    ]) {
      const res = await api.request('GET', query);
      expect(res.status, query).toBe(422);
      expect(res.body.code).toBe('VALIDATION_FAILED');
    }
    expect((await api.request('GET', '/v1/runs?per_page=100')).status).toBe(200);
  });

  it('when register is hammered from one address, then 429 (login: see hardening.test.ts)', async () => {
    const limited = await startTestApi('postgres+sql', { rateLimitPerMinute: 2 });
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) {
        statuses.push(
          (
            await caller(limited.url, null).request('POST', '/v1/auth/register', {
              email: `flood${i}@example.com`,
              password: PASSWORD,
            })
          ).status,
        );
      }
      expect(statuses).toEqual([201, 201, 429, 429]);
      const { rows } = await limited.stores.db.query<{ n: number }>('SELECT count(*)::int AS n FROM accounts');
      expect(rows[0]!.n).toBe(2);
    } finally {
      await limited.close();
    }
  });

  it('when a proxied body is over the proxy limit, then 413 in the provider format, no step, nothing upstream', async () => {
    const runId = await startRun();
    const before = sentTo(upstream);
    const res = await fetch(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-runguard-key': api.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ ...chat, messages: [{ role: 'user', content: 'x'.repeat(1.5 * MiB) }] }),
    });
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({ error: { code: 'PAYLOAD_TOO_LARGE' } });
    expect(sentTo(upstream)).toBe(before);
    expect((await api.request('GET', `/v1/runs/${runId}`)).body.step_count).toBe(0);
  });

  it('when a proxied body nests JSON 100,000 deep, then it is refused 400 in the provider format: nothing forwarded or stored', async () => {
    const runId = await startRun();
    const deep = `{"model":"gpt-4o-mini","messages":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    const before = sentTo(hostile);
    const res = await fetch(`${api.url}/proxy/runs/${runId}/hostile/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-runguard-key': api.apiKey, 'content-type': 'application/json' },
      body: deep,
    });
    // No provider serves it, and recursing over it (the loop rule's hash) would overflow the stack.
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.message).toMatch(/nests deeper than 128 levels/);
    expect(sentTo(hostile)).toBe(before);
    const run = (await api.request('GET', `/v1/runs/${runId}`)).body;
    expect(run.steps).toEqual([]);
    expect((await fetch(`${api.url}/health`)).status).toBe(200);
  });

  it('when headers are huge or an Idempotency-Key is too long, then 431 or 422, and the daemon stays up', async () => {
    const huge = await rawRequest(
      api.url,
      `GET /v1/runs HTTP/1.1\r\nHost: x\r\nx-pad: ${'a'.repeat(64 * 1024)}\r\nconnection: close\r\n\r\n`,
    );
    expect(huge).toMatch(/^HTTP\/1\.1 431/);
    const key = await api.request('POST', '/v1/runs', { user_id: 'u' }, { 'idempotency-key': 'k'.repeat(256) });
    expect(key.status).toBe(422);
    expect((await fetch(`${api.url}/health`)).status).toBe(200);
  });
});

// --- API5 -----------------------------------------------------------------------------------------

describe('API5:2023 Broken Function Level Authorization', () => {
  // Also: test/api/admin.test.ts "when a credential of the wrong kind is used, then 401 per the spec
  // table" (runs writes key-only; me, billing, password JWT-only; reads either).
  it('when a credential is used where its kind is not accepted, then 401: JWT on key-only proxy functions, proxy tokens as bearers, keys as tokens', async () => {
    const r = await register();
    const runId = await startRun(r.key);
    const minted = (await r.key.request('POST', `/v1/runs/${runId}/proxy-token`)).body;
    const before = sentTo(upstream);
    // Minting a proxy token, like every run write, is an API-key function.
    expect((await r.jwt.request('POST', `/v1/runs/${runId}/proxy-token`)).status).toBe(401);
    expect((await r.jwt.request('POST', `/v1/runs/${runId}/end`, { status: 'COMPLETED' })).status).toBe(401);
    // A run's proxy token authorizes proxying into that run, and nothing else.
    for (const [method, path] of [
      ['GET', '/v1/runs'],
      ['GET', `/v1/runs/${runId}`],
      ['GET', '/v1/workspace'],
      ['POST', '/v1/api-keys/regenerate'],
    ]) {
      expect((await as(minted.token).request(method!, path!)).status, path).toBe(401);
    }
    const post = (url: string, headers: Record<string, string> = {}) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(chat),
      });
    // A dashboard JWT is not a guardrail key; an API key is not a proxy token.
    expect(
      (await post(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, { 'x-runguard-key': r.token })).status,
    ).toBe(401);
    expect((await post(`${api.url}/proxy/t/${r.apiKey}/openai/v1/chat/completions`)).status).toBe(401);
    expect(
      (await post(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, { authorization: `Bearer ${r.apiKey}` }))
        .status,
    ).toBe(401);
    expect(sentTo(upstream)).toBe(before);
  });

  it('when a method is overridden by header or an admin-looking path is tried, then no function is reached', async () => {
    const r = await register();
    const ws = await r.key.request(
      'POST',
      '/v1/workspace',
      { max_concurrent_runs: 1 },
      { 'x-http-method-override': 'PATCH' },
    );
    expect(ws.status).toBe(404);
    for (const path of [
      '/v1/admin',
      '/v1/workspaces',
      `/v1/workspaces/${r.workspaceId}`,
      '/v1/accounts',
      '/admin',
      '/v2/runs',
    ]) {
      expect((await r.jwt.request('GET', path)).status, path).toBe(404);
    }
    expect((await r.key.request('GET', '/v1/workspace')).body.max_concurrent_runs).toBe(5);
  });
});

// --- API6 -----------------------------------------------------------------------------------------

describe('API6:2023 Unrestricted Access to Sensitive Business Flows', () => {
  // Also: test/api/admin.test.ts "when plans change, then the kill switch follows the plan and limits
  // follow the ceilings" and "when limits are set, then rules 5 and 6 use them; above the plan ceiling, 403".
  it('when the plan does not include the kill switch, then it cannot be flipped; with it on, no downgrade to such a plan', async () => {
    const r = await register();
    const flip = await r.key.request('POST', '/v1/workspace/kill-switch', { active: true });
    expect(flip.status).toBe(403);
    expect(flip.body.code).toBe('PLAN_REQUIRED');
    await r.jwt.request('POST', '/v1/billing/plan', { plan: 'scale' });
    expect((await r.key.request('POST', '/v1/workspace/kill-switch', { active: true })).status).toBe(200);
    for (const plan of ['basic', 'pro']) {
      const down = await r.jwt.request('POST', '/v1/billing/plan', { plan });
      expect(down.status, plan).toBe(409);
    }
    expect((await r.key.request('GET', '/v1/workspace')).body).toMatchObject({
      plan: 'scale',
      kill_switch_active: true,
    });
  });

  it('when runs start past the monthly limit, then they are BLOCKED, and a BLOCKED run cannot be used: no steps, no end, no proxy token, no proxying', async () => {
    const r = await register();
    await r.key.request('PATCH', '/v1/workspace', { monthly_run_limit: 1 });
    await startRun(r.key);
    const blocked = await r.key.request('POST', '/v1/runs', { user_id: 'agent' });
    expect(blocked.body).toMatchObject({ status: 'BLOCKED', decision: { reason: 'MONTHLY_RUN_LIMIT_EXCEEDED' } });
    const id = blocked.body.id;
    expect((await r.key.request('POST', `/v1/runs/${id}/steps`, { type: 'INPUT', sequence: 1 })).status).toBe(409);
    expect((await r.key.request('POST', `/v1/runs/${id}/end`, { status: 'COMPLETED' })).status).toBe(409);
    expect((await r.key.request('POST', `/v1/runs/${id}/proxy-token`)).status).toBe(409);
    const before = sentTo(upstream);
    const proxied = await fetch(`${api.url}/proxy/runs/${id}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-runguard-key': r.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify(chat),
    });
    expect(proxied.status).toBe(403);
    expect(await proxied.json()).toMatchObject({ error: { code: 'RUN_NOT_RUNNING' } });
    // A run-less proxy call is a run start too: past the limit it is refused before the provider hears of it.
    const runless = await fetch(`${api.url}/proxy/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-runguard-key': r.apiKey, 'x-runguard-user-id': 'agent', 'content-type': 'application/json' },
      body: JSON.stringify(chat),
    });
    expect(runless.status).toBe(403);
    expect(await runless.json()).toMatchObject({ error: { code: 'MONTHLY_RUN_LIMIT_EXCEEDED' } });
    expect(sentTo(upstream)).toBe(before);
    expect((await r.key.request('GET', `/v1/runs/${id}`)).body).toMatchObject({ status: 'BLOCKED', step_count: 0 });
  });

  it('when a limit is raised above the plan by any route (PATCH limits, a plan field, billing with a key), then it stays within the plan', async () => {
    const r = await register();
    for (const body of [
      { max_concurrent_runs: 6 },
      { monthly_run_limit: null },
      { max_concurrent_runs: 1_000_000_000 },
    ]) {
      expect((await r.key.request('PATCH', '/v1/workspace', body)).status).toBe(403);
    }
    expect((await r.key.request('PATCH', '/v1/workspace', { plan: 'enterprise' })).status).toBe(422);
    expect((await r.key.request('POST', '/v1/billing/plan', { plan: 'enterprise' })).status).toBe(401); // key: not a billing credential
    expect((await r.key.request('GET', '/v1/workspace')).body).toMatchObject({
      plan: 'basic',
      monthly_run_limit: 1000,
      max_concurrent_runs: 5,
    });
  });
});

// --- API7 -----------------------------------------------------------------------------------------

describe('API7:2023 Server Side Request Forgery', () => {
  // Also: test/proxy/proxy.test.ts "when a path tries to climb out of the upstream base, then 400".
  // Upstreams come only from configuration (provider-registry.ts); a request can only pick a configured
  // provider by name. Each test: the "evil" server must hear nothing.
  const body = JSON.stringify(chat);
  const raw = (target: string, extra = '', host = '127.0.0.1') =>
    `POST ${target} HTTP/1.1\r\nHost: ${host}\r\nx-runguard-key: ${api.apiKey}\r\ncontent-type: application/json\r\n` +
    `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n${extra}\r\n${body}`;

  it('when the Host header or an absolute-form target names another server, then the call still goes to the configured upstream', async () => {
    const runId = await startRun();
    const path = `/proxy/runs/${runId}/openai/v1/chat/completions`;
    const before = sentTo(upstream);
    const viaHost = await rawRequest(
      api.url,
      raw(path, `x-forwarded-host: 127.0.0.1:${evil.port}\r\n`, `127.0.0.1:${evil.port}`),
    );
    expect(viaHost).toMatch(/^HTTP\/1\.1 200/);
    const absolute = await rawRequest(api.url, raw(`http://127.0.0.1:${evil.port}${path}`));
    expect(absolute).toMatch(/^HTTP\/1\.1 200/);
    expect(upstream.requests.slice(before).map((r) => [r.path, r.headers.host])).toEqual([
      ['/v1/chat/completions', new URL(upstream.url).host],
      ['/v1/chat/completions', new URL(upstream.url).host],
    ]);
    expect(sentTo(evil)).toBe(0);
  });

  it('when the path climbs out of the base with dot segments or encoded slashes, then 400 BAD_PATH and nothing is sent', async () => {
    const runId = await startRun();
    const before = sentTo(upstream);
    for (const rest of [
      'v1/../../x',
      'v1/./chat/completions',
      '..',
      '%2e%2e/x',
      '%2E%2E/x',
      '.%2e/x',
      'v1%2f..%2fadmin',
      'v1%2F..%2Fadmin',
      '%5c..%5cx',
      `%2f%2f127.0.0.1:${evil.port}/x`,
    ]) {
      const res = await rawRequest(api.url, raw(`/proxy/runs/${runId}/openai/${rest}`));
      expect(res, rest).toMatch(/^HTTP\/1\.1 400/);
      expect(res, rest).toContain('BAD_PATH');
    }
    expect(sentTo(upstream)).toBe(before);
    expect(sentTo(evil)).toBe(0);
  });

  it('when the provider name is not configured (a host, a URL, an object key), then 404 and nothing is sent', async () => {
    const runId = await startRun();
    const before = sentTo(upstream) + sentTo(hostile);
    for (const name of [
      `127.0.0.1:${evil.port}`,
      encodeURIComponent(`http://127.0.0.1:${evil.port}`),
      'evil',
      '__proto__',
      'constructor',
      'toString',
      'OPENAI',
      'openai%00',
      '%20openai',
    ]) {
      for (const prefix of [`/proxy/runs/${runId}/`, '/proxy/']) {
        const res = await rawRequest(api.url, raw(`${prefix}${name}/v1/chat/completions`, 'x-runguard-user-id: u\r\n'));
        expect(res, `${prefix}${name}`).toMatch(/^HTTP\/1\.1 (404|400)/);
      }
    }
    expect(sentTo(upstream) + sentTo(hostile)).toBe(before);
    expect(sentTo(evil)).toBe(0);
  });

  it('when the upstream answers a redirect, then the client gets it as it is and nobody follows it', async () => {
    const runId = await startRun();
    for (const status of [302, 307, 308]) {
      const res = await nodeRequest(`${api.url}/proxy/runs/${runId}/hostile/v1/chat/completions`, {
        headers: {
          'x-runguard-key': api.apiKey,
          'content-type': 'application/json',
          'x-hostile': `redirect-${status}`,
        },
        body,
      });
      expect(res.status).toBe(status);
      expect(res.headers.location).toBe(`${evil.url}/stolen`);
      expect(res.body).toBe('{"moved":true}');
    }
    const run = await settled(runId, api, 3);
    expect(run.steps.map((s: any) => [s.status, s.output_data.http_status])).toEqual([
      ['FAILED', 302],
      ['FAILED', 307],
      ['FAILED', 308],
    ]);
    expect(sentTo(evil)).toBe(0);
  });

  it('when a proxy token is minted, then its URLs ignore X-Forwarded-Host (no proxy is trusted)', async () => {
    const runId = await startRun();
    const minted = await api.request('POST', `/v1/runs/${runId}/proxy-token`, undefined, {
      'x-forwarded-host': `127.0.0.1:${evil.port}`,
      'x-forwarded-proto': 'https',
      forwarded: `host=127.0.0.1:${evil.port}`,
    });
    expect(minted.status).toBe(201);
    for (const url of Object.values<string>(minted.body.urls)) expect(url.startsWith(`${api.url}/proxy/t/`)).toBe(true);
  });
});

// --- API8 -----------------------------------------------------------------------------------------

describe('API8:2023 Security Misconfiguration', () => {
  const SECURITY_HEADERS = {
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
  };

  it('when the daemon answers for itself (2xx, 4xx, 404, /health), then security headers; on /v1, no-store too', async () => {
    const r = await register();
    const answers = [
      ['/v1 200', await fetch(`${api.url}/v1/workspace`, { headers: { authorization: `Bearer ${r.apiKey}` } }), true],
      [
        '/v1 login',
        await fetch(`${api.url}/v1/auth/login`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ email: r.email, password: PASSWORD }),
        }),
        true,
      ],
      ['/v1 401', await fetch(`${api.url}/v1/runs`), true],
      [
        '/v1 422',
        await fetch(`${api.url}/v1/runs?per_page=101`, { headers: { authorization: `Bearer ${r.apiKey}` } }),
        true,
      ],
      ['/v1 404', await fetch(`${api.url}/v1/nothing-here`), true],
      ['/health', await fetch(`${api.url}/health`), false],
      ['proxy refusal', await fetch(`${api.url}/proxy/openai/v1/chat/completions`, { method: 'POST' }), false],
    ] as const;
    for (const [label, res, v1] of answers) {
      for (const [name, value] of Object.entries(SECURITY_HEADERS))
        expect(res.headers.get(name), `${label} ${name}`).toBe(value);
      if (v1) expect(res.headers.get('cache-control'), label).toBe('no-store');
      expect(res.headers.get('x-powered-by'), label).toBeNull();
      expect(res.headers.get('server'), label).toBeNull();
    }
  });

  it("when an answer is proxied, then it carries the provider's headers, not the daemon's", async () => {
    const runId = await startRun();
    const res = await fetch(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-runguard-key': api.apiKey, 'content-type': 'application/json' },
      body: JSON.stringify(chat),
    });
    expect(res.status).toBe(200);
    await res.text();
    for (const name of [...Object.keys(SECURITY_HEADERS), 'cache-control'])
      expect(res.headers.get(name), name).toBeNull();
    await settled(runId);
  });

  it('when a browser asks for CORS, then no origin is allowed', async () => {
    const preflight = await fetch(`${api.url}/v1/runs`, {
      method: 'OPTIONS',
      headers: {
        origin: 'https://evil.example',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization',
      },
    });
    const simple = await fetch(`${api.url}/v1/workspace`, {
      headers: { origin: 'https://evil.example', authorization: `Bearer ${api.apiKey}` },
    });
    for (const res of [preflight, simple]) {
      expect(res.headers.get('access-control-allow-origin')).toBeNull();
      expect(res.headers.get('access-control-allow-credentials')).toBeNull();
    }
  });

  it('when a store fails inside a route, then 500 with the generic body: no stack, no SQL, no message of the failure', async () => {
    // The real stores, with runs listing broken the way a driver fails: an error carrying SQL and a stack.
    const base = api.stores.db;
    const broken: Db = {
      ...base,
      kind: base.kind,
      query: async (sql: string, params?: readonly unknown[]) => {
        if (/FROM runs/.test(sql) && /LIMIT/i.test(sql)) {
          throw Object.assign(
            new Error(
              `relation "runs_secret" does not exist: SELECT * FROM runs WHERE workspace_id = '${api.workspaceId}'`,
            ),
            {
              code: '42P01',
              position: '15',
              where: 'PL/pgSQL function secret_fn()',
            },
          );
        }
        return base.query(sql, params);
      },
      exec: (sql) => base.exec(sql),
      transaction: (fn) => base.transaction(fn),
      close: async () => {},
    };
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const app = await buildApp({
      db: broken,
      counters: api.stores.counters,
      clock: { now: () => new Date() },
      logger: createLogger('info', sink),
      version: 't',
      bodyLimitBytes: MiB,
      auth: TEST_AUTH,
      metrics: false,
    });
    try {
      const res = await app.inject({
        method: 'GET',
        url: '/v1/runs',
        headers: { authorization: `Bearer ${api.apiKey}` },
      });
      expect(res.statusCode).toBe(500);
      expect(res.json()).toEqual({ detail: 'Internal server error.', code: 'INTERNAL' });
      expect(res.body).not.toMatch(/SELECT|runs_secret|42P01|secret_fn|at .*\.(js|ts)|stack/i);
      expect(res.headers['cache-control']).toBe('no-store');
      // ... while the log, for the operator, has it, under the request id the client got.
      expect(lines.join('')).toContain('runs_secret');
      expect(lines.join('')).toContain(String(res.headers['x-request-id']));
    } finally {
      await app.close();
    }
  });

  describe('header injection and hygiene through the proxy', () => {
    // Also: test/proxy/proxy.test.ts "header hygiene" (no x-runguard-* or guardrail key upstream after SDK calls).
    const body = JSON.stringify(chat);

    it('when a header value smuggles a line break (bare CR, bare LF, obs-fold, NUL), then Node refuses the request with 400 before we see it', async () => {
      // On the wire CR LF ends a header, so `x-foo: a\r\nx-injected: b` is simply two headers the
      // client chose to send. The injections are the line breaks a value should not hold: Node's
      // parser refuses each of them, and nothing is forwarded.
      const runId = await startRun();
      const before = sentTo(upstream);
      for (const smuggled of [
        'x-foo: a\rx-injected: b',
        'x-foo: a\nx-injected: b',
        'x-foo: a\r\n x-injected: b',
        'x-foo: a\r\n\tx-injected: b',
        'x-foo: a\u0000x-injected: b',
      ]) {
        const res = await rawRequest(
          api.url,
          `POST /proxy/runs/${runId}/openai/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nx-runguard-key: ${api.apiKey}\r\n` +
            `content-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n${smuggled}\r\n\r\n${body}`,
        );
        expect(res, JSON.stringify(smuggled)).toMatch(/^HTTP\/1\.1 400/);
      }
      expect(sentTo(upstream)).toBe(before);
      expect(upstream.requests.some((r) => 'x-injected' in r.headers)).toBe(false);
      // And our own outgoing side cannot be made to write one either: undici refuses such values.
      const { upstreamHeaders } = await import('../../src/proxy/forwarder.js');
      const { request } = await import('undici');
      await expect(
        request(upstream.url, { headers: upstreamHeaders({ 'x-foo': 'a\r\nx-injected: b' }) }),
      ).rejects.toThrow();
    });

    it('when the client sends x-runguard-* and hop-by-hop headers, then none goes upstream; the rest pass as sent', async () => {
      const runId = await startRun();
      const before = sentTo(upstream);
      const res = await nodeRequest(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, {
        headers: {
          'x-runguard-key': api.apiKey,
          'x-runguard-user-id': 'u',
          'x-runguard-anything': 'x',
          'content-type': 'application/json',
          authorization: `Bearer ${PROVIDER_KEY}`,
          connection: 'keep-alive, x-listed-in-connection',
          'x-listed-in-connection': 'hop',
          'keep-alive': 'timeout=5',
          te: 'trailers',
          trailer: 'x-t',
          'proxy-authorization': 'Basic c2VjcmV0',
          'proxy-connection': 'keep-alive',
          'x-api-key': PROVIDER_KEY,
          'x-custom': 'kept',
          'x-smuggled-key': `see ${api.apiKey}`,
        },
        body,
      });
      expect(res.status).toBe(200);
      const sent = upstream.requests[before]!;
      for (const name of [
        'x-runguard-key',
        'x-runguard-user-id',
        'x-runguard-anything',
        'x-listed-in-connection',
        'keep-alive',
        'te',
        'trailer',
        'proxy-authorization',
        'proxy-connection',
        'x-smuggled-key',
      ]) {
        expect(sent.headers[name], name).toBeUndefined();
      }
      expect(sent.headers).toMatchObject({
        authorization: `Bearer ${PROVIDER_KEY}`,
        'x-api-key': PROVIDER_KEY,
        'x-custom': 'kept',
      });
      expect(JSON.stringify(sent.headers)).not.toContain('lg_');
      await settled(runId);
    });

    it("when the provider answers with cookies and hop-by-hop headers, then the client gets neither; the provider's own headers pass", async () => {
      // Chosen: set-cookie is dropped (a provider's cookie is scoped to the provider's site; relayed it
      // would land on the daemon's origin), as are hop-by-hop headers and those named in Connection.
      const runId = await startRun();
      const res = await nodeRequest(`${api.url}/proxy/runs/${runId}/hostile/v1/chat/completions`, {
        headers: { 'x-runguard-key': api.apiKey, 'content-type': 'application/json', 'x-hostile': 'headers' },
        body,
      });
      expect(res.status).toBe(200);
      expect(res.headers['set-cookie']).toBeUndefined();
      expect(res.headers['x-hop-by-name']).toBeUndefined();
      expect(res.headers['proxy-authenticate']).toBeUndefined();
      expect(res.headers['x-provider-header']).toBe('kept');
      expect(res.body).toBe('{"ok":true}');
      await settled(runId);
    });
  });
});

// --- API9 -----------------------------------------------------------------------------------------

/** Method and path of every route the app registered, from Fastify's own route tree. */
function registeredRoutes(tree: string): Set<string> {
  const routes = new Set<string>();
  const stack: string[] = [];
  for (const line of tree.split('\n')) {
    const match = /^([│ ]*)[├└]── (\S+)(?: \(([^)]*)\))?/.exec(line);
    if (!match) continue;
    const depth = match[1]!.length / 4;
    stack.length = depth;
    stack.push(match[2]!);
    for (const method of (match[3] ?? '')
      .split(',')
      .map((m) => m.trim())
      .filter(Boolean)) {
      if (method !== 'HEAD') routes.add(`${method} ${stack.join('').replace(/:(\w+)/g, '{$1}')}`);
    }
  }
  return routes;
}

describe('API9:2023 Improper Inventory Management', () => {
  // Also: test/api/admin.test.ts "serves the OpenAPI document with every endpoint of the contract".
  it('when the app is built with every feature, then every /v1 route it serves is in the OpenAPI document, and nothing else is', async () => {
    const served = [...registeredRoutes(api.app.printRoutes({ commonPrefix: false }))].filter((r) =>
      r.split(' ')[1]!.startsWith('/v1/'),
    );
    // The parse must have found the routes, or the comparison below proves nothing.
    expect(served).toEqual(
      expect.arrayContaining([
        'POST /v1/runs',
        'PATCH /v1/runs/{run_id}/steps/{step_id}',
        'POST /v1/runs/{run_id}/proxy-token',
        'PUT /v1/users/{user_id}',
        'POST /v1/billing/plan',
      ]),
    );
    const doc = (await anonymous().request('GET', '/openapi.json')).body;
    const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>)
      .flatMap(([path, methods]) => Object.keys(methods).map((m) => `${m.toUpperCase()} ${path}`))
      .filter((r) => r.split(' ')[1]!.startsWith('/v1/'));
    expect(served.sort()).toEqual([...new Set(documented)].sort());
    // Every documented operation states its security and its error answers.
    for (const [path, methods] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, operation] of Object.entries(methods)) {
        if (!path.startsWith('/v1/')) continue;
        expect(
          Object.keys(operation.responses ?? {}).some((s) => s.startsWith('4')),
          `${method} ${path}`,
        ).toBe(true);
      }
    }
  });

  it('when an old or unversioned API path is tried, then 404: there is one API version', async () => {
    for (const path of ['/runs', '/v0/runs', '/api/v1/runs', '/v1.0/runs', '/V1/runs']) {
      expect((await api.request('GET', path)).status, path).toBe(404);
    }
  });
});

// --- API10 ----------------------------------------------------------------------------------------

describe('API10:2023 Unsafe Consumption of APIs', () => {
  // Also: test/unit/proxy/usage-tracker.test.ts and sse-decoder.test.ts (the readers, in isolation).
  // Here the provider is hostile end to end: the daemon must relay its answer, keep running, and
  // record only sane numbers: token counts are integers from 0 to 10^12, or null (not reported).
  const call = async (
    ws: { apiKey: string; api: Caller },
    runId: string,
    mode: string,
    provider = 'hostile',
    stream = false,
  ) => {
    const path = provider === 'hostile' ? 'v1/chat/completions' : 'v1/messages';
    const res = await fetch(`${api.url}/proxy/runs/${runId}/${provider}/${path}`, {
      method: 'POST',
      headers: { 'x-runguard-key': ws.apiKey, 'content-type': 'application/json', 'x-hostile': mode },
      body: JSON.stringify({
        model: 'hostile-model',
        messages: [],
        max_tokens: 1,
        ...(stream ? { stream: true } : {}),
      }),
    });
    return { status: res.status, text: await res.text() };
  };

  it('when usage is invalid JSON, negative, fractional, strings or absurd, then the call is relayed and the step records null, never garbage', async () => {
    const ws = await api.newWorkspace();
    await ws.api.request('PUT', '/v1/model-pricing/hostile-model', {
      input_cost_per_token: 1000,
      output_cost_per_token: 1000,
    });
    const runId = await startRun(ws.api);
    const modes = [
      ['invalid-json', 'hostile'],
      ['negative', 'hostile'],
      ['strings', 'hostile'],
      ['absurd', 'hostile'],
      ['sse-garbage', 'hostile'],
      ['anthropic-absurd', 'hostile-anthropic'],
    ] as const;
    for (const [mode, provider] of modes) {
      const res = await call(ws, runId, mode, provider, mode.includes('sse') || mode.includes('anthropic'));
      expect(res.status, mode).toBe(200);
    }
    const run = await settled(runId, ws.api, modes.length);
    for (const [i, step] of run.steps.entries()) {
      expect(step, modes[i]![0]).toMatchObject({
        status: 'COMPLETED',
        prompt_tokens: null,
        completion_tokens: null,
        cached_prompt_tokens: null,
        cost_usd: null,
      });
    }
    expect(run).toMatchObject({ total_tokens: 0, total_cost_usd: 0 });
    expect((await ws.api.request('GET', '/v1/usage')).body.workspace_daily_spend_usd).toBe(0);
  });

  it('when usage is the largest the API accepts at the largest price, then it is recorded exactly and the spend counter saturates instead of overflowing', async () => {
    const ws = await api.newWorkspace();
    await ws.api.request('PUT', '/v1/model-pricing/hostile-model', {
      input_cost_per_token: 1000,
      output_cost_per_token: 1000,
    });
    const runId = await startRun(ws.api);
    for (let i = 0; i < 2; i++) expect((await call(ws, runId, 'largest')).status).toBe(200);
    const run = await settled(runId, ws.api, 2);
    expect(run.steps.map((s: any) => [s.status, s.prompt_tokens, s.completion_tokens, s.cost_usd])).toEqual([
      ['COMPLETED', 1e12, 1e12, 2e15],
      ['COMPLETED', 1e12, 1e12, 2e15],
    ]);
    expect(run).toMatchObject({ total_tokens: 4e12, total_cost_usd: 4e15 });
    // Spend is counted up to the largest budget there is, which it then denies.
    expect((await ws.api.request('GET', '/v1/usage')).body.workspace_daily_spend_usd).toBe(1_000_000_000);
    await ws.api.request('PATCH', '/v1/workspace', { daily_budget_usd: 1_000_000_000 });
    const next = await ws.api.request('POST', `/v1/runs/${runId}/steps`, {
      type: 'MODEL_CALL',
      sequence: 99,
      model: 'hostile-model',
    });
    expect(next.body.decision.reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    // The same through the API itself: 200, not a 500.
    const step = await ws.api.request('POST', `/v1/runs/${runId}/steps`, {
      type: 'TOOL_CALL',
      sequence: 100,
      tool_name: 't',
    });
    expect(step.body.status).toBe('BLOCKED');
  });

  it('when an SSE event is larger than the reader takes, then the stream is relayed whole and usage is read from the events after it', async () => {
    const ws = await api.newWorkspace();
    const runId = await startRun(ws.api);
    const res = await call(ws, runId, 'huge-sse', 'hostile', true);
    expect(res.status).toBe(200);
    expect(res.text.length).toBeGreaterThan(5 * MiB);
    expect(res.text.endsWith('data: [DONE]\n\n')).toBe(true);
    const run = await settled(runId, ws.api);
    expect(run.steps[0]).toMatchObject({ status: 'COMPLETED', prompt_tokens: 11, completion_tokens: 3 });
    expect((await fetch(`${api.url}/health`)).status).toBe(200);
  });
});

// --- No secrets at rest or in logs (API3 excessive exposure, API8) ----------------------------------

describe('no secrets in stored records or logs', () => {
  // Also: test/api/hardening.test.ts (logs of register, login, keyed calls) and test/proxy/proxy.test.ts
  // "header hygiene" (steps, runs, proxy_tokens, idempotency_keys). Here: every table, after every kind of credential was used.
  it('when every kind of credential has been used, then no table holds a password, key secret, JWT, provider key or proxy token', async () => {
    const password = 'a very secret password 42';
    const reg = await anonymous().request('POST', '/v1/auth/register', {
      email: `rest${Date.now()}@example.com`,
      password,
    });
    const key = as(reg.body.api_key);
    const login = await anonymous().request('POST', '/v1/auth/login', { email: reg.body.account.email, password });
    const newPassword = 'another very secret password 43';
    await as(login.body.access_token).request('POST', '/v1/auth/password', {
      current_password: password,
      new_password: newPassword,
    });
    const relogin = await anonymous().request('POST', '/v1/auth/login', {
      email: reg.body.account.email,
      password: newPassword,
    });
    const regenerated = await key.request('POST', '/v1/api-keys/regenerate');
    const key2 = as(regenerated.body.api_key);
    await key2.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
      input_cost_per_token: 0.000001,
      output_cost_per_token: 0.000001,
    });
    const runId = (
      await key2.request(
        'POST',
        '/v1/runs',
        { user_id: 'u', metadata: { note: 'fine' } },
        { 'idempotency-key': 'rest-1' },
      )
    ).body.id;
    const minted = (await key2.request('POST', `/v1/runs/${runId}/proxy-token`)).body;
    const anthropicKey = 'sk-ant-at-rest-0123456789abcdef';
    for (const [url, headers] of [
      [`${minted.urls.openai}/chat/completions?api-key=${PROVIDER_KEY}`, { authorization: `Bearer ${PROVIDER_KEY}` }],
      [
        `${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`,
        { 'x-runguard-key': regenerated.body.api_key, authorization: `Bearer ${PROVIDER_KEY}` },
      ],
      [`${minted.urls.anthropic}/v1/messages`, { 'x-api-key': anthropicKey }],
    ] as const) {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ ...chat, max_tokens: 5 }),
      });
      expect(res.status).toBe(200);
      await res.text();
    }
    await settled(runId, key2, 3);

    const secrets = [
      password,
      newPassword,
      reg.body.api_key,
      keySecret(reg.body.api_key),
      regenerated.body.api_key,
      keySecret(regenerated.body.api_key),
      reg.body.access_token,
      login.body.access_token,
      relogin.body.access_token,
      // A JWT's signature alone is the secret part that matters.
      reg.body.access_token.split('.')[2],
      PROVIDER_KEY,
      anthropicKey,
      minted.token,
      minted.token.slice(4),
      TEST_AUTH.jwtSecret,
    ];
    const { rows: tables } = await api.stores.db.query<{ name: string }>(
      `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`,
    );
    expect(tables.map((t) => t.name)).toEqual(
      expect.arrayContaining(['accounts', 'api_keys', 'proxy_tokens', 'steps', 'runs', 'idempotency_keys', 'settings']),
    );
    let dumped = 0;
    for (const { name } of tables) {
      // As text, the way Postgres renders each value (bytea as hex), and each bytea as UTF-8 and base64 too.
      const { rows } = await api.stores.db.query<Record<string, unknown>>(`SELECT * FROM ${name}`);
      const { rows: asText } = await api.stores.db.query<{ t: string }>(`SELECT t::text AS t FROM ${name} t`);
      const text = [
        ...asText.map((r) => r.t),
        ...rows.flatMap((row) =>
          Object.values(row).map((v) =>
            Buffer.isBuffer(v)
              ? `${v.toString('utf8')} ${v.toString('base64')} ${v.toString('base64url')}`
              : JSON.stringify(v),
          ),
        ),
      ].join('\n');
      dumped += rows.length;
      for (const secret of secrets) expect(text, `${name} holds a secret`).not.toContain(secret);
    }
    expect(dumped).toBeGreaterThan(20);
    // The hashes are there, salted: a password's hash differs from another hash of the same password.
    const { rows: accounts } = await api.stores.db.query<{ password_hash: string }>(
      'SELECT password_hash FROM accounts',
    );
    expect(accounts.every((a) => a.password_hash.startsWith('scrypt$'))).toBe(true);
    expect(new Set(accounts.map((a) => a.password_hash.split('$')[4])).size).toBe(accounts.length);

    // And the log of all this, at debug level.
    const log = logLines.join('');
    expect(log).toContain('/proxy/t/[redacted]/');
    for (const secret of secrets) expect(log).not.toContain(secret);
  });

  it('when a proxy token arrives in an absolute-form target, then the log has it redacted too', async () => {
    const runId = await startRun();
    const minted = (await api.request('POST', `/v1/runs/${runId}/proxy-token`)).body;
    const body = JSON.stringify(chat);
    const res = await rawRequest(
      api.url,
      `POST http://127.0.0.1:${evil.port}/proxy/t/${minted.token}/openai/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
        `content-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
    );
    expect(res).toMatch(/^HTTP\/1\.1 200/);
    await settled(runId);
    expect(logLines.join('')).not.toContain(minted.token);
    expect(sentTo(evil)).toBe(0);
  });
});
