/**
 * The API the dashboard adds, over real HTTP on Postgres and Redis: one-time sign-in links,
 * naming the owner, sign-out, the overview aggregate, the shipped catalog, the run list's time
 * range and the user search. The browser itself is in test/dashboard/.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, caller, startTestApi, type Caller, type TestApi } from '../support/harness.js';

// Every backend: the embedded database is what `npm start` uses out of the box.
describe.each(BACKENDS)('the dashboard API on %s', (backend) => {
  let api: TestApi;
  let now = new Date();
  const clock = { now: () => now };
  const anonymous = () => caller(api.url, null);
  const as = (credential: string): Caller => caller(api.url, credential);

  beforeAll(async () => {
    api = await startTestApi(backend, { clock });
  });
  afterAll(async () => {
    await api?.close();
  });

  async function mintLink(key: Caller = api) {
    const res = await key.request('POST', '/v1/auth/sign-in-links');
    expect(res.status).toBe(201);
    return res.body as { path: string; token: string; expires_at: string };
  }

  const redeem = (token: string) => anonymous().request('POST', '/v1/auth/sign-in-links/redeem', { token });

  describe('one-time sign-in links', () => {
    it('when a link is redeemed, then it signs in to the key workspace once, as an account without email until the owner is named', async () => {
      const link = await mintLink();
      expect(link.path).toBe(`/sign-in#token=${link.token}`);
      expect(Date.parse(link.expires_at) - now.getTime()).toBe(10 * 60_000);
      const first = await redeem(link.token);
      expect(first.status).toBe(200);
      expect(first.body).toMatchObject({ token_type: 'bearer', owner_set: false });
      const again = await redeem(link.token);
      expect(again.status).toBe(401);
      expect(again.body).toMatchObject({ code: 'UNAUTHORIZED' });

      const session = as(first.body.access_token);
      const me = await session.request('GET', '/v1/auth/me');
      expect(me.body).toMatchObject({ email: null, workspace: { id: api.workspaceId } });
      // No password yet: changing it is refused with a reason, naming the owner works once.
      expect(
        (await session.request('POST', '/v1/auth/password', { current_password: 'x', new_password: 'new password 1' }))
          .status,
      ).toBe(400);
      // A commonly breached password is refused here too (issue #48, item 5).
      const weak = await session.request('POST', '/v1/auth/owner', {
        email: 'Owner@Example.com',
        password: 'iloveyou',
      });
      expect(weak.status).toBe(422);
      expect(weak.body.errors).toEqual([{ path: 'body.password', message: expect.stringMatching(/commonly used/) }]);
      const named = await session.request('POST', '/v1/auth/owner', {
        email: 'Owner@Example.com',
        password: 'correct horse battery',
      });
      expect(named.status).toBe(200);
      // The link's session ended with the naming; the new token works.
      expect((await session.request('GET', '/v1/auth/me')).status).toBe(401);
      const owner = as(named.body.access_token);
      expect((await owner.request('GET', '/v1/auth/me')).body).toMatchObject({ email: 'owner@example.com' });
      expect(
        (
          await owner.request('POST', '/v1/auth/owner', {
            email: 'other@example.com',
            password: 'correct horse battery',
          })
        ).status,
      ).toBe(409);
      const login = await anonymous().request('POST', '/v1/auth/login', {
        email: 'owner@example.com',
        password: 'correct horse battery',
      });
      expect(login.status).toBe(200);

      // A later link signs in as that same owner, whose account now has a password.
      const later = await redeem((await mintLink()).token);
      expect(later.body).toMatchObject({ owner_set: true });
      expect((await as(later.body.access_token).request('GET', '/v1/auth/me')).body).toMatchObject({ id: me.body.id });
    });

    it('when a link is older than 10 minutes, then it is refused', async () => {
      const link = await mintLink();
      now = new Date(now.getTime() + 10 * 60_000 + 1);
      try {
        expect((await redeem(link.token)).status).toBe(401);
      } finally {
        now = new Date();
      }
    });

    it('when links are minted with a token or without a credential, then they are refused; a made-up token is refused', async () => {
      const login = await anonymous().request('POST', '/v1/auth/login', {
        email: 'owner@example.com',
        password: 'correct horse battery',
      });
      expect((await as(login.body.access_token).request('POST', '/v1/auth/sign-in-links')).status).toBe(401);
      expect((await anonymous().request('POST', '/v1/auth/sign-in-links')).status).toBe(401);
      expect((await redeem('made-up-token')).status).toBe(401);
    });

    it("when another workspace's key mints a link, then it signs in to that workspace only", async () => {
      const other = await api.newWorkspace();
      const answer = await redeem((await mintLink(other.api)).token);
      const ws = await as(answer.body.access_token).request('GET', '/v1/workspace');
      expect(ws.body.id).toBe(other.workspaceId);
    });

    it('when an account signs out, then its tokens stop working', async () => {
      const login = await anonymous().request('POST', '/v1/auth/login', {
        email: 'owner@example.com',
        password: 'correct horse battery',
      });
      const session = as(login.body.access_token);
      expect((await session.request('POST', '/v1/auth/sign-out')).status).toBe(204);
      expect((await session.request('GET', '/v1/workspace')).status).toBe(401);
    });
  });

  describe('what the pages read', () => {
    it('when runs are denied, priced and unpriced today, then the overview counts them', async () => {
      const ws = await api.newWorkspace();
      await ws.api.request('PUT', '/v1/model-pricing/priced-model', {
        input_cost_per_token: 0.001,
        output_cost_per_token: 0.002,
      });
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'u1' })).body;
      const priced = (
        await ws.api.request('POST', `/v1/runs/${run.id}/steps`, {
          type: 'MODEL_CALL',
          sequence: 1,
          model: 'priced-model',
        })
      ).body;
      await ws.api.request('PATCH', `/v1/runs/${run.id}/steps/${priced.id}`, {
        status: 'COMPLETED',
        prompt_tokens: 10,
        completion_tokens: 5,
      });
      const unpriced = (
        await ws.api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'MODEL_CALL', sequence: 2, model: 'mystery' })
      ).body;
      await ws.api.request('PATCH', `/v1/runs/${run.id}/steps/${unpriced.id}`, {
        status: 'COMPLETED',
        prompt_tokens: 7,
        completion_tokens: 3,
      });
      await ws.api.request('PUT', '/v1/users/u2', { blocked: true });
      expect((await ws.api.request('POST', '/v1/runs', { user_id: 'u2' })).body.status).toBe('BLOCKED');
      const other = (await ws.api.request('POST', '/v1/runs', { user_id: 'u3' })).body;
      await ws.api.request('PUT', '/v1/users/u3', { blocked: true });
      expect(
        (await ws.api.request('POST', `/v1/runs/${other.id}/steps`, { type: 'TOOL_CALL', sequence: 1, tool_name: 't' }))
          .body.status,
      ).toBe('BLOCKED');

      const res = await ws.api.request('GET', '/v1/overview');
      expect(res.status).toBe(200);
      expect(res.body).toEqual({
        date: now.toISOString().slice(0, 10),
        denials_by_reason: [{ reason: 'USER_BLOCKED', count: 2 }],
        // u2's run was denied: only allowed runs count as a user's runs.
        top_users: [
          { user_id: 'u1', spend_usd: 0.02, runs: 1 },
          { user_id: 'u3', spend_usd: 0, runs: 1 },
        ],
        top_models: [{ model: 'priced-model', spend_usd: 0.02, calls: 1, tokens: 15 }],
        unpriced_calls: [{ model: 'mystery', calls: 1, tokens: 10 }],
      });
      // Another workspace sees none of it.
      expect((await api.request('GET', '/v1/overview')).body.unpriced_calls).toEqual([]);
    });

    it('when the run list has a time range, then only runs started in it are listed and counted', async () => {
      const ws = await api.newWorkspace();
      // The app's clock stamps the run: the range is around it.
      const before = new Date(now.getTime() - 1000).toISOString();
      const run = (await ws.api.request('POST', '/v1/runs', { user_id: 'timed' })).body;
      const after = new Date(now.getTime() + 1000).toISOString();
      const inside = await ws.api.request('GET', `/v1/runs?started_from=${before}&started_before=${after}`);
      expect(inside.body).toMatchObject({ total: 1, items: [{ id: run.id }] });
      const later = await ws.api.request('GET', `/v1/runs?started_from=${after}`);
      expect(later.body).toMatchObject({ total: 0, items: [] });
      expect((await ws.api.request('GET', '/v1/runs?started_from=yesterday')).status).toBe(422);
    });

    it('when users are searched, then the ids containing the text (any case) are listed and counted', async () => {
      const ws = await api.newWorkspace();
      for (const id of ['Alice-1', 'alice-2', 'bob', 'x%_y'])
        await ws.api.request('PUT', `/v1/users/${encodeURIComponent(id)}`, { blocked: false });
      const found = await ws.api.request('GET', '/v1/users?search=ALICE');
      expect(found.body.total).toBe(2);
      expect(found.body.items.map((u: { user_id: string }) => u.user_id).sort()).toEqual(['Alice-1', 'alice-2']);
      // Taken as text, not as a pattern.
      expect((await ws.api.request('GET', `/v1/users?search=${encodeURIComponent('%_')}`)).body.total).toBe(1);
    });

    it('when the catalog is asked for, then it lists the shipped prices per token', async () => {
      const res = await api.request('GET', '/v1/model-pricing/catalog');
      expect(res.status).toBe(200);
      expect(res.body.models.length).toBeGreaterThan(10);
      expect(res.body.models[0]).toMatchObject({
        model: expect.any(String),
        input_cost_per_token: expect.any(Number),
        output_cost_per_token: expect.any(Number),
      });
      // As the import takes them: the whole list goes in as it came.
      const imported = await api.request('POST', '/v1/model-pricing/import', {
        models: res.body.models,
        dry_run: true,
      });
      expect(imported.status).toBe(200);
      expect(imported.body.new).toBe(res.body.models.length);
    });

    it('when / and the page paths are asked for without a build, then they say how to build it; the API 404s stay JSON', async () => {
      // This app is built from src/ with no dashboard folder.
      const res = await fetch(`${api.url}/runs`);
      expect(res.status).toBe(404);
      expect(await res.text()).toContain('npm run build');
      expect((await api.request('GET', '/v1/nothing-here')).body).toMatchObject({ code: 'NOT_FOUND' });
    });
  });
});
