/**
 * Accounts, credentials and workspace administration through real HTTP on Postgres and Redis:
 * every endpoint of the contract's table, credential kinds, isolation, and each rule reached
 * through the administration API.
 */
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { caller, startTestApi, type Caller, type TestApi } from '../support/harness.js';

const SECRET = new TextEncoder().encode('test-secret-test-secret-test-secret-0123');

describe('accounts and administration', () => {
  let api: TestApi;
  let seq = 0;
  beforeAll(async () => {
    api = await startTestApi('postgres+redis');
  });
  afterAll(async () => {
    await api?.close();
  });

  const anonymous = () => caller(api.url, null);
  const as = (credential: string): Caller => caller(api.url, credential);

  /** Registers a fresh account: its workspace, key and token. */
  const register = async () => {
    const email = `owner${++seq}-${Date.now()}@example.com`;
    const res = await anonymous().request('POST', '/v1/auth/register', {
      email,
      password: 'correct horse battery',
      workspace_name: `ws ${seq}`,
    });
    expect(res.status).toBe(201);
    return { email, ...res.body, key: as(res.body.api_key), jwt: as(res.body.access_token) };
  };

  describe('register and login', () => {
    it('when an account registers, then it gets a basic workspace, a key shown once and a token', async () => {
      const r = await register();
      expect(r.account).toEqual({ id: expect.any(String), email: r.email, created_at: expect.stringMatching(/Z$/) });
      expect(r.workspace).toMatchObject({ plan: 'basic', name: expect.stringMatching(/^ws /) });
      expect(r.api_key).toMatch(/^lg_[a-z0-9]{12}_[A-Za-z0-9_-]{32,}$/);
      expect(r).toMatchObject({ token_type: 'bearer', expires_in: 3600 });
      const ws = await r.key.request('GET', '/v1/workspace');
      expect(ws.body).toMatchObject({
        id: r.workspace.id,
        plan: 'basic',
        kill_switch_active: false,
        daily_budget_usd: null,
        user_daily_budget_usd: null,
        monthly_run_limit: 1000,
        max_concurrent_runs: 5,
      });
      const me = await r.jwt.request('GET', '/v1/auth/me');
      expect(me.body).toEqual({
        id: r.account.id,
        email: r.email,
        created_at: r.account.created_at,
        workspace: r.workspace,
      });
    });

    it('when the email is taken (in any case), then 409; bad email or short password, then 422', async () => {
      const r = await register();
      const taken = await anonymous().request('POST', '/v1/auth/register', {
        email: r.email.toUpperCase(),
        password: 'another password',
      });
      expect(taken.status).toBe(409);
      expect(
        (await anonymous().request('POST', '/v1/auth/register', { email: 'not-an-email', password: 'long enough' }))
          .status,
      ).toBe(422);
      expect(
        (await anonymous().request('POST', '/v1/auth/register', { email: 'x@example.com', password: 'short' })).status,
      ).toBe(422);
      expect(
        (
          await anonymous().request('POST', '/v1/auth/register', {
            email: 'y@example.com',
            password: 'long enough',
            plan: 'enterprise',
          })
        ).status,
      ).toBe(422);
    });

    it('when login fails, then the same 401 for an unknown email and a wrong password', async () => {
      const r = await register();
      const ok = await anonymous().request('POST', '/v1/auth/login', {
        email: r.email,
        password: 'correct horse battery',
      });
      expect(ok.status).toBe(200);
      expect(ok.body).toEqual({ access_token: expect.any(String), token_type: 'bearer', expires_in: 3600 });
      const wrong = await anonymous().request('POST', '/v1/auth/login', { email: r.email, password: 'wrong password' });
      const unknown = await anonymous().request('POST', '/v1/auth/login', {
        email: `nobody-${r.email}`,
        password: 'wrong password',
      });
      expect([wrong.status, unknown.status]).toEqual([401, 401]);
      expect(wrong.body).toEqual(unknown.body);
    });

    it('when the password changes, then earlier tokens stop working and the new password logs in', async () => {
      const r = await register();
      const wrongCurrent = await r.jwt.request('POST', '/v1/auth/password', {
        current_password: 'nope nope',
        new_password: 'brand new password',
      });
      expect(wrongCurrent.status).toBe(400);
      const changed = await r.jwt.request('POST', '/v1/auth/password', {
        current_password: 'correct horse battery',
        new_password: 'brand new password',
      });
      expect(changed.status).toBe(204);
      expect((await r.jwt.request('GET', '/v1/auth/me')).status).toBe(401);
      expect(
        (await anonymous().request('POST', '/v1/auth/login', { email: r.email, password: 'correct horse battery' }))
          .status,
      ).toBe(401);
      const login = await anonymous().request('POST', '/v1/auth/login', {
        email: r.email,
        password: 'brand new password',
      });
      expect((await as(login.body.access_token).request('GET', '/v1/auth/me')).status).toBe(200);
    });
  });

  describe('credential kinds', () => {
    it('when a credential of the wrong kind is used, then 401 per the spec table', async () => {
      const r = await register();
      // API key only: client writes.
      expect((await r.jwt.request('POST', '/v1/runs', { user_id: 'u' })).status).toBe(401);
      expect((await r.key.request('POST', '/v1/runs', { user_id: 'u' })).status).toBe(201);
      // JWT only: account operations and billing.
      for (const [method, path, body] of [
        ['GET', '/v1/auth/me'],
        ['GET', '/v1/billing'],
        ['POST', '/v1/billing/plan', { plan: 'pro' }],
        ['POST', '/v1/auth/password', { current_password: 'correct horse battery', new_password: 'whatever else' }],
      ] as const) {
        expect((await r.key.request(method, path, body)).status, path).toBe(401);
      }
      // Either: reads and configuration.
      for (const path of ['/v1/runs', '/v1/workspace', '/v1/users', '/v1/usage', '/v1/api-keys', '/v1/model-pricing']) {
        expect((await r.key.request('GET', path)).status, path).toBe(200);
        expect((await r.jwt.request('GET', path)).status, path).toBe(200);
      }
    });

    it('when a token is tampered, expired, unsigned or signed with another key, then 401', async () => {
      const r = await register();
      const [header, payload, signature] = r.access_token.split('.');
      const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
      const forged = Buffer.from(JSON.stringify({ ...claims, ws: '00000000-0000-4000-8000-000000000000' })).toString(
        'base64url',
      );
      const none = Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url');
      const expired = await new SignJWT({ ws: claims.ws, tv: claims.tv })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject(claims.sub)
        .setIssuedAt(Math.floor(Date.now() / 1000) - 7200)
        .setExpirationTime(Math.floor(Date.now() / 1000) - 3600)
        .sign(SECRET);
      const otherKey = await new SignJWT({ ws: claims.ws, tv: claims.tv })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject(claims.sub)
        .setIssuedAt()
        .setExpirationTime('1h')
        .sign(new TextEncoder().encode('another-secret-another-secret-another'));
      const valid = await new SignJWT({ ws: claims.ws, tv: claims.tv })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject(claims.sub)
        .setIssuedAt()
        .setExpirationTime('1h')
        .sign(SECRET);
      for (const token of [
        `${header}.${forged}.${signature}`,
        `${none}.${payload}.`,
        expired,
        otherKey,
        `${r.access_token}x`,
        'garbage',
      ]) {
        expect((await as(token).request('GET', '/v1/auth/me')).status, token.slice(0, 20)).toBe(401);
      }
      expect((await as(valid).request('GET', '/v1/auth/me')).status).toBe(200);
    });
  });

  describe('API keys', () => {
    it('when keys are listed, then no secret or hash; when regenerated, then every earlier key stops at once', async () => {
      const r = await register();
      await r.key.request('GET', '/v1/runs'); // marks last_used_at
      const listed = await r.jwt.request('GET', '/v1/api-keys');
      expect(listed.body).toHaveLength(1);
      expect(Object.keys(listed.body[0]).sort()).toEqual([
        'created_at',
        'id',
        'last_used_at',
        'name',
        'prefix',
        'revoked_at',
        'role',
      ]);
      expect(r.api_key.startsWith(`lg_${listed.body[0].prefix}_`)).toBe(true);
      expect(listed.body[0].last_used_at).not.toBeNull();
      expect(JSON.stringify(listed.body)).not.toContain(r.api_key.split('_').slice(2).join('_'));

      const fresh = await r.key.request('POST', '/v1/api-keys/regenerate');
      expect(fresh.status).toBe(201);
      expect(fresh.body).toEqual({
        id: expect.any(String),
        prefix: expect.any(String),
        api_key: expect.stringMatching(/^lg_/),
      });
      expect((await r.key.request('GET', '/v1/runs')).status).toBe(401);
      expect((await as(fresh.body.api_key).request('POST', '/v1/runs', { user_id: 'u' })).status).toBe(201);
      const after = await r.jwt.request('GET', '/v1/api-keys');
      expect(after.body.map((k: any) => k.revoked_at === null)).toEqual([true, false]);
    });
  });

  describe('workspace configuration drives the rules', () => {
    it('when budgets are set in USD, then they are stored exactly and deny at the very next decision', async () => {
      const r = await register();
      const patched = await r.key.request('PATCH', '/v1/workspace', {
        daily_budget_usd: 12.5,
        user_daily_budget_usd: 0.000001,
        name: 'renamed',
      });
      expect(patched.status).toBe(200);
      expect(patched.body).toMatchObject({ name: 'renamed', daily_budget_usd: 12.5, user_daily_budget_usd: 0.000001 });
      await r.key.request('PATCH', '/v1/workspace', { user_daily_budget_usd: 0 });
      expect((await r.key.request('POST', '/v1/runs', { user_id: 'u' })).body.decision.reason).toBe(
        'USER_DAILY_BUDGET_EXCEEDED',
      );
      await r.key.request('PATCH', '/v1/workspace', { user_daily_budget_usd: null, daily_budget_usd: 0 });
      expect((await r.key.request('POST', '/v1/runs', { user_id: 'u' })).body.decision.reason).toBe(
        'WORKSPACE_DAILY_BUDGET_EXCEEDED',
      );
      await r.key.request('PATCH', '/v1/workspace', { daily_budget_usd: null });
      expect((await r.key.request('POST', '/v1/runs', { user_id: 'u' })).body.status).toBe('RUNNING');
    });

    it('when limits are set, then rules 5 and 6 use them; above the plan ceiling, 403', async () => {
      const r = await register();
      for (const body of [{ max_concurrent_runs: 6 }, { max_concurrent_runs: null }, { monthly_run_limit: 1001 }]) {
        const res = await r.key.request('PATCH', '/v1/workspace', body);
        expect(res.status, JSON.stringify(body)).toBe(403);
        expect(res.body.code).toBe('PLAN_REQUIRED');
      }
      expect((await r.key.request('PATCH', '/v1/workspace', { max_concurrent_runs: 1 })).body.max_concurrent_runs).toBe(
        1,
      );
      expect((await r.key.request('POST', '/v1/runs', { user_id: 'u' })).body.status).toBe('RUNNING');
      expect((await r.key.request('POST', '/v1/runs', { user_id: 'u' })).body.decision.reason).toBe(
        'MAX_CONCURRENT_RUNS_EXCEEDED',
      );
      await r.key.request('PATCH', '/v1/workspace', { max_concurrent_runs: 5, monthly_run_limit: 1 });
      expect((await r.key.request('POST', '/v1/runs', { user_id: 'u' })).body.decision.reason).toBe(
        'MONTHLY_RUN_LIMIT_EXCEEDED',
      );
      expect((await r.key.request('PATCH', '/v1/workspace', { monthly_run_limit: -1 })).status).toBe(422);
      expect((await r.key.request('PATCH', '/v1/workspace', { plan: 'enterprise' })).status).toBe(422);
    });

    it('when plans change, then the kill switch follows the plan and limits follow the ceilings', async () => {
      const r = await register();
      expect((await r.key.request('POST', '/v1/workspace/kill-switch', { active: true })).status).toBe(403);
      const billing = await r.jwt.request('GET', '/v1/billing');
      expect(billing.body).toMatchObject({
        plan: 'basic',
        limits: { monthly_run_limit: 1000, max_concurrent_runs: 5, kill_switch: false },
      });
      expect(billing.body.plans.map((p: any) => p.name)).toEqual(['basic', 'pro', 'scale', 'enterprise']);
      const pro = await r.jwt.request('POST', '/v1/billing/plan', { plan: 'pro' });
      expect(pro.body.limits).toEqual({ monthly_run_limit: 25000, max_concurrent_runs: 25, kill_switch: false });
      expect((await r.key.request('POST', '/v1/workspace/kill-switch', { active: true })).status).toBe(403);
      await r.jwt.request('POST', '/v1/billing/plan', { plan: 'enterprise' });
      expect((await r.key.request('GET', '/v1/workspace')).body).toMatchObject({
        plan: 'enterprise',
        monthly_run_limit: null,
        max_concurrent_runs: null,
      });
      expect((await r.key.request('POST', '/v1/workspace/kill-switch', { active: true })).body.active).toBe(true);
      expect((await r.key.request('POST', '/v1/runs', { user_id: 'u' })).body.decision.reason).toBe(
        'KILL_SWITCH_ACTIVE',
      );
      const refused = await r.jwt.request('POST', '/v1/billing/plan', { plan: 'basic' });
      expect(refused.status).toBe(409);
      await r.key.request('POST', '/v1/workspace/kill-switch', { active: false });
      await r.jwt.request('POST', '/v1/billing/plan', { plan: 'scale' });
      await r.key.request('PATCH', '/v1/workspace', { max_concurrent_runs: 50 });
      const down = await r.jwt.request('POST', '/v1/billing/plan', { plan: 'basic' });
      expect(down.body.limits).toEqual({ monthly_run_limit: 1000, max_concurrent_runs: 5, kill_switch: false });
      expect((await r.jwt.request('POST', '/v1/billing/plan', { plan: 'gold' })).status).toBe(422);
    });
  });

  describe('SDK users', () => {
    it('when a user is blocked before their first run, then starts are denied; unblocked, allowed', async () => {
      const r = await register();
      const blocked = await r.key.request('PUT', '/v1/users/future-user', { blocked: true });
      expect(blocked.status).toBe(200);
      expect(blocked.body).toMatchObject({
        user_id: 'future-user',
        blocked: true,
        daily_budget_usd: null,
        daily_spend_usd: 0,
        run_count: 0,
      });
      expect((await r.key.request('POST', '/v1/runs', { user_id: 'future-user' })).body.decision.reason).toBe(
        'USER_BLOCKED',
      );
      await r.key.request('PUT', '/v1/users/future-user', { blocked: false });
      expect((await r.key.request('POST', '/v1/runs', { user_id: 'future-user' })).body.status).toBe('RUNNING');
    });

    it("when a user's budget is set, then their spend against it is listed and enforced", async () => {
      const r = await register();
      await r.key.request('PUT', '/v1/model-pricing/m', { input_cost_per_token: 0.01, output_cost_per_token: 0.02 });
      await r.key.request('PUT', '/v1/users/spender', { daily_budget_usd: 0.05 });
      const run = (await r.key.request('POST', '/v1/runs', { user_id: 'spender' })).body;
      const s = await r.key.request('POST', `/v1/runs/${run.id}/steps`, {
        type: 'MODEL_CALL',
        sequence: 1,
        model: 'm',
      });
      await r.key.request('PATCH', `/v1/runs/${run.id}/steps/${s.body.id}`, {
        status: 'COMPLETED',
        prompt_tokens: 1,
        completion_tokens: 2,
      });
      const next = await r.key.request('POST', `/v1/runs/${run.id}/steps`, {
        type: 'MODEL_CALL',
        sequence: 2,
        model: 'm',
      });
      expect(next.body.decision.reason).toBe('USER_DAILY_BUDGET_EXCEEDED');
      await r.key.request('PUT', '/v1/users/other', { blocked: true });
      const list = await r.key.request('GET', '/v1/users');
      expect(list.body).toMatchObject({ total: 2, page: 1, per_page: 50 });
      const spender = list.body.items.find((u: any) => u.user_id === 'spender');
      expect(spender).toMatchObject({ blocked: false, daily_budget_usd: 0.05, daily_spend_usd: 0.05, run_count: 1 });
      const onlyBlocked = await r.key.request('GET', '/v1/users?blocked=true');
      expect(onlyBlocked.body.items.map((u: any) => u.user_id)).toEqual(['other']);
      expect((await r.key.request('GET', '/v1/users?per_page=1&page=2')).body.items).toHaveLength(1);
      expect((await r.key.request('PUT', '/v1/users/x', { blocked: 'yes' })).status).toBe(422);
      expect((await r.key.request('PUT', '/v1/users/x', { daily_budget_usd: -1 })).status).toBe(422);
    });
  });

  describe('usage', () => {
    it("when runs and spend happen, then usage reports today's figures and a daily series", async () => {
      const r = await register();
      await r.key.request('PATCH', '/v1/workspace', { daily_budget_usd: 10 });
      await r.key.request('PUT', '/v1/model-pricing/m', { input_cost_per_token: 0.1, output_cost_per_token: 0 });
      const run = (await r.key.request('POST', '/v1/runs', { user_id: 'u' })).body;
      await r.key.request('POST', '/v1/runs', { user_id: 'v' });
      const s = await r.key.request('POST', `/v1/runs/${run.id}/steps`, {
        type: 'MODEL_CALL',
        sequence: 1,
        model: 'm',
      });
      await r.key.request('PATCH', `/v1/runs/${run.id}/steps/${s.body.id}`, { status: 'COMPLETED', prompt_tokens: 3 });
      await r.key.request('POST', `/v1/runs/${run.id}/end`, { status: 'COMPLETED' });
      const usage = await r.jwt.request('GET', '/v1/usage?days=7');
      const today = new Date().toISOString().slice(0, 10);
      expect(usage.body).toMatchObject({
        date: today,
        workspace_daily_spend_usd: 0.3,
        workspace_daily_budget_usd: 10,
        monthly_runs: 2,
        monthly_run_limit: 1000,
        concurrent_runs: 1,
        max_concurrent_runs: 5,
      });
      expect(usage.body.daily).toHaveLength(7);
      expect(usage.body.daily.at(-1)).toEqual({ date: today, spend_usd: 0.3, runs: 2 });
      expect(usage.body.daily[0]).toMatchObject({ spend_usd: 0, runs: 0 });
      expect((await r.jwt.request('GET', '/v1/usage?days=367')).status).toBe(422);
    });
  });

  describe('isolation', () => {
    it('when two workspaces exist, then neither sees nor changes anything of the other', async () => {
      const a = await register();
      const b = await register();
      await a.key.request('PUT', '/v1/model-pricing/secret-model', {
        input_cost_per_token: 1,
        output_cost_per_token: 1,
      });
      await a.key.request('PUT', '/v1/users/alice', { blocked: true });
      const run = (await a.key.request('POST', '/v1/runs', { user_id: 'bob' })).body;
      const s = await a.key.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 1 });
      await b.key.request('POST', '/v1/workspace/kill-switch', { active: true }); // basic: 403 anyway

      expect((await b.key.request('GET', '/v1/runs')).body).toMatchObject({ items: [], total: 0 });
      expect((await b.key.request('GET', `/v1/runs/${run.id}`)).status).toBe(404);
      expect((await b.key.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 2 })).status).toBe(
        404,
      );
      expect((await b.key.request('PATCH', `/v1/runs/${run.id}/steps/${s.body.id}`, { status: 'FAILED' })).status).toBe(
        404,
      );
      expect((await b.key.request('POST', `/v1/runs/${run.id}/end`, { status: 'FAILED' })).status).toBe(404);
      // B has the shipped catalog (every new workspace does), never A's own prices.
      expect((await b.key.request('GET', '/v1/model-pricing')).body.map((p: any) => p.model)).not.toContain(
        'secret-model',
      );
      expect((await b.key.request('GET', '/v1/users')).body).toMatchObject({ items: [], total: 0 });
      expect((await b.jwt.request('GET', '/v1/usage')).body).toMatchObject({ monthly_runs: 0, concurrent_runs: 0 });
      const bKeys = (await b.jwt.request('GET', '/v1/api-keys')).body;
      const aKeys = (await a.jwt.request('GET', '/v1/api-keys')).body;
      expect(bKeys.map((k: any) => k.id)).not.toContain(aKeys[0].id);
      // b regenerating its keys leaves a's key working; b blocking "bob" does not block a's bob.
      await b.key.request('POST', '/v1/api-keys/regenerate');
      await (await register()).key.request('PUT', '/v1/users/bob', { blocked: true });
      expect(
        (await a.key.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 2 })).body.status,
      ).toBe('ALLOWED');
      expect((await a.key.request('GET', '/v1/workspace')).body.kill_switch_active).toBe(false);
    });
  });

  it('serves the OpenAPI document with every endpoint of the contract', async () => {
    const doc = (await anonymous().request('GET', '/openapi.json')).body;
    const paths = Object.keys(doc.paths);
    for (const path of [
      '/v1/auth/register',
      '/v1/auth/login',
      '/v1/auth/me',
      '/v1/auth/password',
      '/v1/api-keys',
      '/v1/api-keys/regenerate',
      '/v1/workspace',
      '/v1/workspace/kill-switch',
      '/v1/users',
      '/v1/users/{user_id}',
      '/v1/usage',
      '/v1/billing',
      '/v1/billing/plan',
      '/v1/runs',
      '/v1/runs/{run_id}',
      '/v1/runs/{run_id}/end',
      '/v1/runs/{run_id}/steps',
      '/v1/runs/{run_id}/steps/{step_id}',
      '/v1/model-pricing',
      '/v1/model-pricing/{model}',
      '/health',
    ]) {
      expect(paths, path).toContain(path);
    }
  });
});
