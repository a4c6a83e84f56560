/**
 * Least privilege for API keys (issue #51, part 3): an agent key starts runs, records steps and
 * reads and writes only the runs it started (any other is not found); every write of settings
 * answers it 403 FORBIDDEN.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, caller, startTestApi, type TestApi } from '../support/harness.js';

describe.each(BACKENDS)('key roles on %s', (backend) => {
  let api: TestApi;

  beforeAll(async () => {
    // With a proxy (never reached here): the route that mints a run's proxy token is the proxy's.
    api = await startTestApi(backend, { proxy: { upstream: 'http://127.0.0.1:9' } });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('when an agent key is created, then it is listed with its role and its secret is answered once', async () => {
    const created = await api.request('POST', '/v1/api-keys', { name: 'ci-bot', role: 'agent' });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      id: expect.any(String),
      prefix: expect.any(String),
      api_key: expect.stringMatching(/^lg_/),
      name: 'ci-bot',
      role: 'agent',
    });
    const listed = (await api.request('GET', '/v1/api-keys')).body as { id: string; role: string }[];
    expect(listed.find((key) => key.id === created.body.id)?.role).toBe('agent');
    expect(listed.every((key) => key.role === 'admin' || key.id === created.body.id)).toBe(true);
    expect((await api.request('POST', '/v1/api-keys', { name: 'x', role: 'root' })).status).toBe(422);
  });

  it('when an agent key writes settings, then each write is 403 FORBIDDEN and nothing changes', async () => {
    const agent = caller(
      api.url,
      (await api.request('POST', '/v1/api-keys', { name: 'agent', role: 'agent' })).body.api_key,
    );
    const writes: [string, string, unknown][] = [
      ['PATCH', '/v1/workspace', { daily_budget_usd: 1000 }],
      ['POST', '/v1/workspace/kill-switch', { active: false }],
      ['POST', '/v1/budgets', { scope: 'workspace', period: 'day', limit_usd: 1 }],
      ['POST', '/v1/api-keys', { name: 'escalate', role: 'admin' }],
      ['POST', '/v1/api-keys/regenerate', null],
      ['PUT', '/v1/users/someone', { blocked: false }],
      ['PUT', '/v1/model-pricing/gpt-4o', { input_cost_per_token: 0, output_cost_per_token: 0 }],
      ['POST', '/v1/webhooks', { url: 'https://example.com/hook', events: ['budget.threshold'] }],
    ];
    for (const [method, path, body] of writes) {
      const res = await agent.request(method, path, body ?? undefined);
      expect({ path, status: res.status, code: res.body?.code }).toEqual({ path, status: 403, code: 'FORBIDDEN' });
    }
    expect((await api.request('GET', '/v1/workspace')).body.daily_budget_usd).not.toBe(1000);
    expect((await api.request('GET', '/v1/budgets')).body).toEqual([]);
  });

  it('when an agent key runs, then it reads only the runs it started', async () => {
    const agent = caller(
      api.url,
      (await api.request('POST', '/v1/api-keys', { name: 'reader', role: 'agent' })).body.api_key,
    );
    const own = (await agent.request('POST', '/v1/runs', { user_id: 'bot' })).body;
    expect(own.status).toBe('RUNNING');
    const step = await agent.request('POST', `/v1/runs/${own.id}/steps`, {
      type: 'TOOL_CALL',
      tool_name: 'search',
      model: null,
      sequence: 1,
    });
    expect(step.status).toBe(201);
    const other = (await api.request('POST', '/v1/runs', { user_id: 'bot' })).body;
    const listed = (await agent.request('GET', '/v1/runs')).body;
    expect(listed.items.map((run: { id: string }) => run.id)).toEqual([own.id]);
    expect(listed.total).toBe(1);
    expect((await agent.request('GET', `/v1/runs/${own.id}`)).status).toBe(200);
    expect((await agent.request('GET', `/v1/runs/${other.id}`)).status).toBe(404);
    // An admin key reads both.
    const all = (await api.request('GET', '/v1/runs')).body.items.map((run: { id: string }) => run.id);
    expect(all).toEqual(expect.arrayContaining([own.id, other.id]));
    expect((await agent.request('POST', `/v1/runs/${own.id}/end`, { status: 'COMPLETED' })).status).toBe(200);
  });

  it("when an agent key mints a proxy token, then only for a run it started; another's is not found, as for reads", async () => {
    const agent = caller(
      api.url,
      (await api.request('POST', '/v1/api-keys', { name: 'minter', role: 'agent' })).body.api_key,
    );
    const own = (await agent.request('POST', '/v1/runs', { user_id: 'bot' })).body;
    const minted = await agent.request('POST', `/v1/runs/${own.id}/proxy-token`);
    expect(minted.status).toBe(201);
    expect(minted.body.token).toMatch(/^rgp_/);
    // Another key's run, and a run the dashboard or an admin key started: 404, nothing minted.
    const otherAgent = caller(
      api.url,
      (await api.request('POST', '/v1/api-keys', { name: 'other', role: 'agent' })).body.api_key,
    );
    const others = [
      (await otherAgent.request('POST', '/v1/runs', { user_id: 'bot' })).body.id,
      (await api.request('POST', '/v1/runs', { user_id: 'bot' })).body.id,
    ];
    for (const runId of others) {
      const refused = await agent.request('POST', `/v1/runs/${runId}/proxy-token`);
      expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 404, code: 'RUN_NOT_FOUND' });
    }
    // An admin key mints for any run of the workspace.
    expect((await api.request('POST', `/v1/runs/${others[0]}/proxy-token`)).status).toBe(201);
  });

  it("when an agent key writes into another key's run, then each write is not found, as for reads, and nothing changes", async () => {
    const agent = caller(
      api.url,
      (await api.request('POST', '/v1/api-keys', { name: 'writer', role: 'agent' })).body.api_key,
    );
    const otherAgent = caller(
      api.url,
      (await api.request('POST', '/v1/api-keys', { name: 'owner', role: 'agent' })).body.api_key,
    );
    const step = { type: 'TOOL_CALL', tool_name: 'search', model: null };
    // Another agent key's run, and one an admin key started; each with a step of its owner's.
    const others = [otherAgent, api].map(async (owner) => {
      const run = (await owner.request('POST', '/v1/runs', { user_id: 'bot' })).body;
      const own = (await owner.request('POST', `/v1/runs/${run.id}/steps`, { ...step, sequence: 1 })).body;
      return { runId: run.id as string, stepId: own.id as string };
    });
    for (const { runId, stepId } of await Promise.all(others)) {
      const writes = [
        await agent.request('POST', `/v1/runs/${runId}/steps`, { ...step, sequence: 2 }),
        await agent.request('PATCH', `/v1/runs/${runId}/steps/${stepId}`, { status: 'COMPLETED' }),
        await agent.request('POST', `/v1/runs/${runId}/end`, { status: 'FAILED' }),
      ];
      for (const write of writes) {
        expect({ status: write.status, code: write.body.code }).toEqual({ status: 404, code: 'RUN_NOT_FOUND' });
      }
      // Nothing changed: still running, with its owner's step alone, unfinished.
      const run = (await api.request('GET', `/v1/runs/${runId}`)).body;
      expect(run.status).toBe('RUNNING');
      expect(run.steps.map((s: { id: string; status: string }) => [s.id, s.status])).toEqual([[stepId, 'ALLOWED']]);
      // An admin key writes into any run of the workspace.
      expect((await api.request('PATCH', `/v1/runs/${runId}/steps/${stepId}`, { status: 'COMPLETED' })).status).toBe(
        200,
      );
      expect((await api.request('POST', `/v1/runs/${runId}/end`, { status: 'COMPLETED' })).status).toBe(200);
    }
  });

  it("when an agent key proxies into another key's run, then the call is refused, not found, before any step", async () => {
    const key = (await api.request('POST', '/v1/api-keys', { name: 'proxier', role: 'agent' })).body.api_key;
    const agent = caller(api.url, key);
    const own = (await agent.request('POST', '/v1/runs', { user_id: 'bot' })).body;
    const other = (await api.request('POST', '/v1/runs', { user_id: 'bot' })).body;
    const proxied = (runId: string) =>
      fetch(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-runguard-key': key },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
      });
    const refused = await proxied(other.id);
    expect(refused.status).toBe(404);
    expect(JSON.stringify(await refused.json())).toContain('RUN_NOT_FOUND');
    expect((await api.request('GET', `/v1/runs/${other.id}`)).body.steps).toEqual([]);
    // Into its own run the call is taken (a step recorded; the upstream here answers nothing).
    await (await proxied(own.id)).text();
    expect((await agent.request('GET', `/v1/runs/${own.id}`)).body.steps).toHaveLength(1);
  });
});
