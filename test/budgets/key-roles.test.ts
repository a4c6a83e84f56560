/**
 * Least privilege for API keys (issue #51, part 3): an agent key starts runs, records steps and
 * reads the runs it started; every write of settings answers it 403 FORBIDDEN.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, caller, startTestApi, type TestApi } from '../support/harness.js';

describe.each(BACKENDS)('key roles on %s', (backend) => {
  let api: TestApi;

  beforeAll(async () => {
    api = await startTestApi(backend);
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
});
