/**
 * GET /v1/tools/usage over real HTTP on Postgres: a day's TOOL_CALL steps per tool, with the
 * denied and failed ones counted apart and the spend summed exactly from the tool prices.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '../support/harness.js';

describe('tool usage per day', () => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startTestApi('postgres+redis');
  });
  afterAll(async () => {
    await api?.close();
  });

  const startRun = async (userId: string) => {
    const res = await api.request('POST', '/v1/runs', { user_id: userId });
    expect(res.status).toBe(201);
    return res.body.id as string;
  };
  const toolCall = async (runId: string, sequence: number, toolName: string, finish?: 'COMPLETED' | 'FAILED') => {
    const res = await api.request('POST', `/v1/runs/${runId}/steps`, {
      type: 'TOOL_CALL',
      sequence,
      tool_name: toolName,
      input_data: { n: sequence },
    });
    expect(res.status).toBe(201);
    if (finish) {
      const done = await api.request('PATCH', `/v1/runs/${runId}/steps/${res.body.id}`, {
        status: finish,
        duration_ms: 3,
      });
      expect(done.status).toBe(200);
    }
    return res.body as { status: string };
  };

  it('when tools are called, denied and failed, then each tool has its calls, denials, failures and exact spend', async () => {
    expect((await api.request('PUT', '/v1/tool-pricing/github.*', { per_call_usd: 0.1 })).status).toBe(200);
    expect(
      (await api.request('PATCH', '/v1/workspace', { tool_policy: { deny: ['github.delete_*'], allow: null } })).status,
    ).toBe(200);

    const search = await startRun('tools-a');
    for (const sequence of [1, 2, 3]) await toolCall(search, sequence, 'github.search_code', 'COMPLETED');
    const denied = await toolCall(await startRun('tools-b'), 1, 'github.delete_repo');
    expect(denied.status).toBe('BLOCKED');
    const files = await startRun('tools-c');
    await toolCall(files, 1, 'fs.read_file', 'COMPLETED');
    await toolCall(files, 2, 'fs.read_file', 'FAILED');

    const today = await api.request('GET', '/v1/tools/usage');
    expect(today.status).toBe(200);
    expect(today.body.date).toMatch(/^\d{4}-\d{2}-\d{2}$/);
    // 3 × $0.1 summed in NUMERIC is 0.3 exactly (a float sum would be 0.30000000000000004).
    expect(today.body.rows).toEqual([
      { tool: 'github.search_code', calls: 3, denied: 0, failed: 0, spend_usd: 0.3 },
      { tool: 'fs.read_file', calls: 2, denied: 0, failed: 1, spend_usd: 0 },
      { tool: 'github.delete_repo', calls: 1, denied: 1, failed: 0, spend_usd: 0 },
    ]);
    const same = await api.request('GET', `/v1/tools/usage?date=${today.body.date}`);
    expect(same.body).toEqual(today.body);

    const dayBefore = new Date(Date.parse(`${today.body.date}T00:00:00Z`) - 86_400_000).toISOString().slice(0, 10);
    expect((await api.request('GET', `/v1/tools/usage?date=${dayBefore}`)).body).toEqual({ date: dayBefore, rows: [] });

    const other = await api.newWorkspace();
    expect((await other.api.request('GET', '/v1/tools/usage')).body.rows).toEqual([]);
  });

  it('when the date is not a calendar date, then the answer is 422', async () => {
    for (const date of ['yesterday', '2026-13-01', '2026-1-1']) {
      const res = await api.request('GET', `/v1/tools/usage?date=${date}`);
      expect(res.status).toBe(422);
      expect(res.body.code).toBeDefined();
    }
  });
});
