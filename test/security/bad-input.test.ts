/**
 * A corpus of hostile and malformed input against every endpoint. Each gets a 4xx in the
 * contract's format (never a 5xx) and leaves no trace in the records.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { caller, startTestApi, type Caller, type TestApi } from '../support/harness.js';

const INJECTIONS = [
  "' OR '1'='1",
  "'; DROP TABLE runs; --",
  '$(rm -rf /)',
  '../../etc/passwd',
  '<script>alert(1)</script>',
  '%00',
  '{{7*7}}',
];
const BAD_UUIDS = [
  'not-a-uuid',
  '123',
  "00000000-0000-4000-8000-00000000000' OR 1=1",
  '00000000000040008000000000000000',
  '%27%20OR%201%3D1',
];
const WRONG_TYPES = [42, -1, 1.5, true, null, [], {}, 'text', 2 ** 53 + 2, 1e308];
const deep = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);

describe('hostile input', () => {
  let api: TestApi;
  let jwt: Caller;
  let runId: string;
  let stepId: string;

  /** What a bad request must not change. */
  const footprint = async () => {
    const { rows } = await api.stores.db.query<Record<string, number>>(
      `SELECT (SELECT count(*)::int FROM runs) AS runs, (SELECT count(*)::int FROM steps) AS steps,
        (SELECT count(*)::int FROM model_pricing) AS pricing, (SELECT count(*)::int FROM sdk_users) AS users,
        (SELECT count(*)::int FROM accounts) AS accounts, (SELECT count(*)::int FROM api_keys) AS keys,
        (SELECT count(*)::int FROM steps WHERE status <> 'ALLOWED') AS finished,
        (SELECT count(*)::int FROM runs WHERE status <> 'RUNNING') AS ended,
        (SELECT md5(string_agg(w::text, ',' ORDER BY id)) FROM workspaces w) AS workspaces`,
    );
    return rows[0];
  };

  beforeAll(async () => {
    api = await startTestApi('postgres+redis');
    const reg = await caller(api.url, null).request('POST', '/v1/auth/register', {
      email: 'hostile@example.com',
      password: 'long enough pw',
    });
    jwt = caller(api.url, reg.body.access_token);
    runId = (await api.request('POST', '/v1/runs', { user_id: 'u' })).body.id;
    stepId = (await api.request('POST', `/v1/runs/${runId}/steps`, { type: 'INPUT', sequence: 1 })).body.id;
  });
  afterAll(async () => {
    await api?.close();
  });

  const expectRefused = async (
    who: Caller,
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ) => {
    const res = await who.request(method, path, body, headers);
    const label = `${method} ${path} ${typeof body === 'string' ? body.slice(0, 40) : JSON.stringify(body)?.slice(0, 60)}`;
    expect(res.status, label).toBeGreaterThanOrEqual(400);
    expect(res.status, label).toBeLessThan(500);
    expect(res.body, label).toMatchObject({ detail: expect.any(String), code: expect.any(String) });
    expect(JSON.stringify(res.body), label).not.toMatch(/at .*\.(js|ts):\d+|SELECT|INSERT|syntax error/i);
    return res;
  };

  it('when bodies have wrong types, unknown or missing fields, then 422 on every write endpoint', async () => {
    const before = await footprint();
    const writes: [Caller, string, string, Record<string, unknown>][] = [
      [api, 'POST', '/v1/runs', { user_id: 'u' }],
      [api, 'POST', `/v1/runs/${runId}/steps`, { type: 'INPUT', sequence: 99 }],
      [api, 'PATCH', `/v1/runs/${runId}/steps/${stepId}`, { status: 'COMPLETED' }],
      [api, 'POST', `/v1/runs/${runId}/end`, { status: 'COMPLETED' }],
      [api, 'PUT', '/v1/model-pricing/m', { input_cost_per_token: 0.1, output_cost_per_token: 0.1 }],
      [api, 'POST', '/v1/workspace/kill-switch', { active: false }],
      [api, 'PATCH', '/v1/workspace', { max_concurrent_runs: 3 }],
      [api, 'PUT', '/v1/users/someone', { blocked: false }],
      [jwt, 'POST', '/v1/billing/plan', { plan: 'scale' }],
      [jwt, 'POST', '/v1/auth/password', { current_password: 'long enough pw', new_password: 'another long one' }],
      [caller(api.url, null), 'POST', '/v1/auth/register', { email: 'x@example.com', password: 'long enough pw' }],
      [caller(api.url, null), 'POST', '/v1/auth/login', { email: 'x@example.com', password: 'long enough pw' }],
    ];
    for (const [who, method, path, valid] of writes) {
      for (const field of Object.keys(valid)) {
        for (const wrong of WRONG_TYPES) {
          if (typeof wrong === typeof valid[field] && !Array.isArray(wrong) && wrong !== null) continue;
          if (wrong === null && field === 'max_concurrent_runs') continue; // null is meaningful there (and 403 above the plan)
          await expectRefused(who, method, path, { ...valid, [field]: wrong });
        }
        const { [field]: _dropped, ...missing } = valid;
        if (!(method === 'PATCH' && path === '/v1/workspace') && !path.startsWith('/v1/users/')) {
          await expectRefused(who, method, path, missing);
        }
      }
      await expectRefused(who, method, path, { ...valid, is_admin: true, workspace_id: api.workspaceId });
      await expectRefused(who, method, path, [valid]);
      await expectRefused(who, method, path, 'null');
    }
    expect(await footprint()).toEqual(before);
  });

  it('when JSON is broken, huge, deeply nested, or not JSON at all, then 400, 413, 415 or 422', async () => {
    const before = await footprint();
    const cases: [unknown, number, Record<string, string>?][] = [
      ['{"user_id": "u"', 400],
      ['{"user_id": "u"}}', 400],
      ['', 400],
      ['{"user_id": "u", "__proto__": {"admin": true}}', 422],
      ['{"user_id": "u", "metadata": {"constructor": {"prototype": {"x": 1}}}}', 422],
      [`{"user_id":"u","metadata":${deep(64)}}`, 422],
      [`{"user_id":"u","metadata":${deep(50_000)}}`, 422],
      [{ user_id: 'u', metadata: { blob: 'x'.repeat(2_000_000) } }, 413],
      [{ user_id: 'u'.repeat(10_000) }, 422],
      [{ user_id: 'a\u0000b' }, 422],
      [{ user_id: 'lone \ud800 surrogate' }, 422],
      [{ user_id: 'u', metadata: { 'key\u0000': 1 } }, 422],
      ['user_id=u', 415, { 'content-type': 'application/x-www-form-urlencoded' }],
      ['<run user_id="u"/>', 415, { 'content-type': 'text/xml' }],
    ];
    for (const [body, status, headers] of cases) {
      const res = await expectRefused(api, 'POST', '/v1/runs', body, headers);
      expect(res.status, String(body).slice(0, 50)).toBe(status);
    }
    expect(await footprint()).toEqual(before);
  });

  it('when a key could reach a prototype, then 422 says so: the JSON is valid, the key is refused', async () => {
    for (const body of [
      '{"user_id": "u", "__proto__": {"admin": true}}',
      '{"user_id": "u", "metadata": {"constructor": {"prototype": {}}}}',
    ]) {
      const res = await expectRefused(api, 'POST', '/v1/runs', body);
      expect(res.body).toMatchObject({ code: 'VALIDATION_FAILED', detail: expect.stringContaining('__proto__') });
    }
  });

  it("when a path holds a malformed percent-escape, then 400 in the contract's format, not the router's", async () => {
    for (const path of [
      '/v1/runs/%zz',
      '/v1/runs/%',
      '/v1/users/%ED%A0%80',
      '/proxy/runs/%zz/openai/v1/chat/completions',
    ]) {
      const res = await expectRefused(api, 'GET', path);
      expect(res.status, path).toBe(400);
      expect(res.body, path).toEqual({ detail: expect.stringContaining('percent-escape'), code: 'BAD_REQUEST' });
    }
  });

  it('when numbers are out of range, negative or fractional, then 422', async () => {
    const before = await footprint();
    for (const value of [2 ** 53, 2 ** 63, 1e20, -1, 0.5, -0.5]) {
      await expectRefused(api, 'PATCH', `/v1/runs/${runId}/steps/${stepId}`, {
        status: 'COMPLETED',
        prompt_tokens: value,
      });
      await expectRefused(api, 'PATCH', `/v1/runs/${runId}/steps/${stepId}`, {
        status: 'COMPLETED',
        completion_tokens: value,
      });
      await expectRefused(api, 'PATCH', `/v1/runs/${runId}/steps/${stepId}`, {
        status: 'COMPLETED',
        duration_ms: value,
      });
      await expectRefused(api, 'POST', `/v1/runs/${runId}/steps`, { type: 'INPUT', sequence: value });
    }
    for (const value of [2 ** 63, 1e12, -1]) {
      await expectRefused(api, 'PUT', '/v1/model-pricing/m', { input_cost_per_token: value, output_cost_per_token: 0 });
      await expectRefused(api, 'PATCH', '/v1/workspace', { daily_budget_usd: value });
    }
    for (const q of ['page=9007199254740993', 'page=1.5', 'per_page=-0', 'per_page=ten']) {
      await expectRefused(api, 'GET', `/v1/runs?${q}`);
    }
    expect(await footprint()).toEqual(before);
  });

  it('when ids in paths are malformed or carry injections, then 422 or 404, and nothing leaks', async () => {
    const before = await footprint();
    for (const id of BAD_UUIDS) {
      const path = encodeURIComponent(id);
      await expectRefused(api, 'GET', `/v1/runs/${path}`);
      await expectRefused(api, 'POST', `/v1/runs/${path}/end`, { status: 'COMPLETED' });
      await expectRefused(api, 'POST', `/v1/runs/${path}/steps`, { type: 'INPUT', sequence: 5 });
      await expectRefused(api, 'PATCH', `/v1/runs/${runId}/steps/${path}`, { status: 'COMPLETED' });
    }
    for (const text of INJECTIONS) {
      await expectRefused(api, 'GET', `/v1/runs?status=${encodeURIComponent(text)}`);
      await expectRefused(api, 'GET', `/v1/runs?page=${encodeURIComponent(text)}`);
      await expectRefused(api, 'GET', `/v1/users?blocked=${encodeURIComponent(text)}`);
    }
    expect(await footprint()).toEqual(before);
  });

  it('when injection strings are data, then they are stored and returned verbatim, never executed', async () => {
    for (const text of INJECTIONS) {
      const run = await api.request('POST', '/v1/runs', { user_id: text, metadata: { note: text } });
      expect(run.status).toBe(201);
      const list = await api.request('GET', `/v1/runs?user_id=${encodeURIComponent(text)}`);
      expect(list.body.items.map((r: any) => r.user_id)).toEqual([text]);
      expect((await api.request('GET', `/v1/runs/${run.body.id}`)).body.metadata).toEqual({ note: text });
      expect((await api.request('PUT', `/v1/users/${encodeURIComponent(text)}`, { blocked: true })).body.user_id).toBe(
        text,
      );
      expect(
        (
          await api.request('PUT', `/v1/model-pricing/${encodeURIComponent(text)}`, {
            input_cost_per_token: 0,
            output_cost_per_token: 0,
          })
        ).body.model,
      ).toBe(text);
    }
    const odd = ['😀 emoji', 'مرحبا RTL', 'e\u0301 combining', '\u200b zero width', 'ｆｕｌｌｗｉｄｔｈ'];
    for (const text of odd) {
      const run = await api.request('POST', '/v1/runs', { user_id: text, metadata: { text } });
      expect(run.status).toBe(201);
      expect((await api.request('GET', `/v1/runs/${run.body.id}`)).body).toMatchObject({
        user_id: text,
        metadata: { text },
      });
    }
    const tables = await api.stores.db.query(
      `SELECT count(*)::int AS n FROM information_schema.tables WHERE table_name = 'runs'`,
    );
    expect(tables.rows[0]).toEqual({ n: 1 });
  });
});
