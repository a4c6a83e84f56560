/**
 * Issue #50: tool calls through the sidecar. The official MCP SDK on both sides, each in a process
 * of its own: the fixture McpServer behind Streamable HTTP (SSE answers, or JSON), the SDK's Client
 * through the daemon's MCP URLs. Every tools/call is a TOOL_CALL step of its run, checked by every
 * rule before the tool runs, recorded with its outcome, duration and price.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';
import { parseMetrics } from '../support/prometheus.js';
import { connectClient, startMcpServer, type McpFixture } from '../support/mcp-fixture.js';

const until = async (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(20);
  }
};

interface ToolResult {
  content: { type: string; text: string }[];
  isError?: boolean;
  _meta?: Record<string, { code: string; detail: Record<string, unknown> | null; step_id: string | null }>;
}

describe.each([
  { answers: 'SSE', json: false },
  { answers: 'JSON', json: true },
])('MCP tool calls through the sidecar ($answers answers)', ({ json }) => {
  let api: ProxyTestApi;
  let server: McpFixture;
  const clients: Client[] = [];
  /** A connection of the test's own: the transaction that holds a step record's lock. */
  let holder: pg.Client;

  beforeAll(async () => {
    server = await startMcpServer({ json });
    api = await startProxyTestApi('postgres+redis');
    const registered = await api.request('POST', '/v1/mcp/servers', {
      name: 'fx',
      url: server.url,
      headers: { 'X-Upstream-Token': 'upstream-secret-1234' },
    });
    expect(registered.status).toBe(201);
    holder = new pg.Client({ connectionString: api.stores.databaseUrl! });
    await holder.connect();
  });
  afterAll(async () => {
    await Promise.allSettled(clients.map((client) => client.close()));
    await holder?.end();
    // Now and then a keep-alive connection the SDK's fetch leaves behind is not taken for idle, and
    // close would wait for it (see the MCP note): the test cuts every connection first.
    api?.app.server.closeAllConnections();
    await api?.close();
    await server?.close();
  });

  const startRun = async (user = 'alice', limits?: Record<string, number>) => {
    const res = await api.request('POST', '/v1/runs', { user_id: user, ...(limits ? { limits } : {}) });
    expect(res.body.status).toBe('RUNNING');
    return res.body.id as string;
  };
  const clientOfRun = async (runId: string, headers: Record<string, string> = {}) => {
    const client = await connectClient(`${api.url}/proxy/runs/${runId}/mcp/fx`, {
      'x-runguard-key': api.apiKey,
      ...headers,
    });
    clients.push(client);
    return client;
  };
  const runDetail = async (runId: string) => (await api.request('GET', `/v1/runs/${runId}`)).body;
  const toolSteps = async (runId: string) =>
    ((await runDetail(runId)).steps as { type: string; status: string }[]).filter((step) => step.type === 'TOOL_CALL');
  const finished = (runId: string, count: number) =>
    until(`${count} tool steps finished`, async () => {
      const steps = await toolSteps(runId);
      return steps.length >= count && steps.every((step) => step.status !== 'ALLOWED');
    });
  const serverSaw = async (name: string, match: (args: Record<string, unknown>) => boolean) =>
    (await server.calls()).some((call) => call.name === name && match(call.args));

  it('when an agent calls a tool through a run URL, then the call is a TOOL_CALL step with its server, id, duration and price', async () => {
    expect((await api.request('PUT', '/v1/tool-pricing/fx.echo', { per_call_usd: 0.002 })).status).toBe(200);
    const runId = await startRun();
    const client = await clientOfRun(runId, { authorization: 'Bearer agent-own-token' });
    const result = (await client.callTool({ name: 'echo', arguments: { text: 'hello' } })) as ToolResult;
    expect(result.content[0]!.text).toBe('hello');
    expect(result.isError).toBeFalsy();
    await finished(runId, 1);
    const [step] = (await runDetail(runId)).steps.filter((s: { type: string }) => s.type === 'TOOL_CALL');
    expect(step).toMatchObject({
      type: 'TOOL_CALL',
      status: 'COMPLETED',
      tool_name: 'fx.echo',
      input_data: { text: 'hello' },
      mcp: { server: 'fx' },
      cost_usd: 0.002,
      decision: { outcome: 'ALLOW' },
    });
    expect(step.mcp.request_id).not.toBeNull();
    expect(step.duration_ms).toBeGreaterThanOrEqual(0);
    expect((await runDetail(runId)).total_cost_usd).toBe(0.002);
    // The agent's own Authorization reached the server untouched, beside the registered header.
    expect(await server.lastHeaders()).toMatchObject({
      authorization: 'Bearer agent-own-token',
      token: 'upstream-secret-1234',
    });
  });

  it('when other methods pass (initialize, tools/list, ping), then they are not steps', async () => {
    const runId = await startRun();
    const client = await clientOfRun(runId);
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name)).toEqual(expect.arrayContaining(['echo', 'fail', 'delete_file']));
    await client.ping();
    expect(await toolSteps(runId)).toEqual([]);
  });

  it('when the tool answers isError, then its step is FAILED', async () => {
    const runId = await startRun();
    const client = await clientOfRun(runId);
    const result = (await client.callTool({ name: 'fail', arguments: {} })) as ToolResult;
    expect(result.isError).toBe(true);
    await finished(runId, 1);
    expect((await toolSteps(runId))[0]).toMatchObject({ status: 'FAILED', output_data: { is_error: true } });
  });

  it('when a tool sends progress and the server logs to the session, then both reach the client through the sidecar', async () => {
    const runId = await startRun();
    const client = await clientOfRun(runId);
    const logged: unknown[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
      logged.push(notification.params.data);
    });
    const progress: number[] = [];
    const result = (await client.callTool({ name: 'progress', arguments: { steps: 3 } }, undefined, {
      onprogress: (update) => progress.push(update.progress),
    })) as ToolResult;
    expect(result.content[0]!.text).toBe('3 steps');
    // A server answering JSON has no stream of the request's own to send progress on.
    if (!json) expect(progress).toEqual([1, 2, 3]);
    // Not tied to a request: the session's GET stream carries it, in either mode.
    await until('the log message arrived', () => logged.includes('progress done'));
    await finished(runId, 1);
    expect((await toolSteps(runId))[0]).toMatchObject({ status: 'COMPLETED', tool_name: 'fx.progress' });
  });

  it('when the kill switch is on, then the tool call is denied with a reason the model reads, and the server never sees it', async () => {
    const runId = await startRun();
    const client = await clientOfRun(runId);
    await api.request('POST', '/v1/workspace/kill-switch', { active: true });
    try {
      const result = (await client.callTool({
        name: 'delete_file',
        arguments: { path: '/kill-switch' },
      })) as ToolResult;
      expect(result.isError).toBe(true);
      expect(result.content[0]!.text).toMatch(/^runguard denied this tool call: KILL_SWITCH_ACTIVE \(/);
      expect(result._meta?.['runguard/decision']).toMatchObject({ code: 'KILL_SWITCH_ACTIVE' });
    } finally {
      await api.request('POST', '/v1/workspace/kill-switch', { active: false });
    }
    expect(await serverSaw('delete_file', (args) => args.path === '/kill-switch')).toBe(false);
    expect(await toolSteps(runId)).toMatchObject([{ status: 'BLOCKED', decision: { reason: 'KILL_SWITCH_ACTIVE' } }]);
  });

  it('when the user is blocked, then a run-less tool call is denied and the server never sees it', async () => {
    await api.request('PUT', '/v1/users/blocked-bob', { blocked: true });
    const client = await connectClient(`${api.url}/mcp/fx`, {
      'x-runguard-key': api.apiKey,
      'x-runguard-user-id': 'blocked-bob',
    });
    clients.push(client);
    const result = (await client.callTool({ name: 'delete_file', arguments: { path: '/blocked' } })) as ToolResult;
    expect(result.isError).toBe(true);
    expect(result._meta?.['runguard/decision']?.code).toBe('USER_BLOCKED');
    expect(await serverSaw('delete_file', (args) => args.path === '/blocked')).toBe(false);
  });

  it('when a run-less tool call is allowed, then it has a run of its own, ended with its outcome', async () => {
    const client = await connectClient(`${api.url}/mcp/fx`, {
      'x-runguard-key': api.apiKey,
      'x-runguard-user-id': 'carol',
    });
    clients.push(client);
    await client.callTool({ name: 'echo', arguments: { text: 'run-less' } });
    let run: { id: string; status: string } | undefined;
    await until('the run ended', async () => {
      run = (await api.request('GET', '/v1/runs?user_id=carol')).body.items[0];
      return run?.status === 'COMPLETED';
    });
    expect((await toolSteps(run!.id))[0]).toMatchObject({ tool_name: 'fx.echo', status: 'COMPLETED' });
  });

  it("when a run's step cap is reached, then the next tool call is denied and never reaches the server", async () => {
    const runId = await startRun('alice', { max_steps: 1 });
    const client = await clientOfRun(runId);
    await client.callTool({ name: 'echo', arguments: { text: 'first of one' } });
    const result = (await client.callTool({ name: 'delete_file', arguments: { path: '/over-cap' } })) as ToolResult;
    expect(result._meta?.['runguard/decision']).toMatchObject({
      code: 'RUN_STEP_LIMIT_EXCEEDED',
      detail: { steps: 1, limit: 1 },
    });
    expect(result.content[0]!.text).toContain('1 of 1 steps');
    expect(await serverSaw('delete_file', (args) => args.path === '/over-cap')).toBe(false);
  });

  it('when an agent repeats the same tool call in a loop, then the repeat is denied', async () => {
    const runId = await startRun('alice', { max_identical_calls: 2 });
    const client = await clientOfRun(runId);
    const call = () => client.callTool({ name: 'echo', arguments: { text: 'again' } }) as Promise<ToolResult>;
    expect((await call()).isError).toBeFalsy();
    expect((await call()).isError).toBeFalsy();
    const third = await call();
    expect(third._meta?.['runguard/decision']?.code).toBe('REPEATED_CALL_LOOP');
    // Other arguments are another call.
    expect(((await client.callTool({ name: 'echo', arguments: { text: 'other' } })) as ToolResult).isError).toBeFalsy();
  });

  it('when a tool price takes the user over the daily budget, then the next tool call is denied', async () => {
    await api.request('PUT', '/v1/tool-pricing/fx.*', { per_call_usd: 0.5 });
    await api.request('PUT', '/v1/users/budget-dan', { daily_budget_usd: 0.9 });
    const runId = await startRun('budget-dan');
    const client = await clientOfRun(runId);
    await client.callTool({ name: 'delete_file', arguments: { path: '/a' } });
    await finished(runId, 1);
    await client.callTool({ name: 'delete_file', arguments: { path: '/b' } });
    await finished(runId, 2);
    const steps = await toolSteps(runId);
    // The most specific price wins: fx.* for delete_file.
    expect(steps.map((step) => (step as unknown as { cost_usd: number }).cost_usd)).toEqual([0.5, 0.5]);
    const third = (await client.callTool({ name: 'delete_file', arguments: { path: '/c' } })) as ToolResult;
    expect(third._meta?.['runguard/decision']).toMatchObject({
      code: 'USER_DAILY_BUDGET_EXCEEDED',
      detail: { spend_usd: 1, budget_usd: 0.9 },
    });
    expect(await serverSaw('delete_file', (args) => args.path === '/c')).toBe(false);
    await api.request('DELETE', '/v1/tool-pricing/fx.*');
  });

  it('when the workspace denies tools by pattern, then they are gone from tools/list and a call of one is denied', async () => {
    const patched = await api.request('PATCH', '/v1/workspace', { tool_policy: { deny: ['*.delete_*'], allow: null } });
    expect(patched.status).toBe(200);
    expect(patched.body.tool_policy).toEqual({ deny: ['*.delete_*'], allow: null });
    try {
      const runId = await startRun();
      const client = await clientOfRun(runId);
      const { tools } = await client.listTools();
      expect(tools.map((tool) => tool.name)).not.toContain('delete_file');
      expect(tools.map((tool) => tool.name)).toContain('echo');
      const result = (await client.callTool({ name: 'delete_file', arguments: { path: '/policy' } })) as ToolResult;
      expect(result._meta?.['runguard/decision']).toMatchObject({
        code: 'TOOL_NOT_ALLOWED',
        detail: { tool: 'fx.delete_file', pattern: '*.delete_*' },
      });
      expect(await serverSaw('delete_file', (args) => args.path === '/policy')).toBe(false);
      expect(
        ((await client.callTool({ name: 'echo', arguments: { text: 'allowed' } })) as ToolResult).isError,
      ).toBeFalsy();
    } finally {
      await api.request('PATCH', '/v1/workspace', { tool_policy: null });
    }
  });

  it("when the step's record waits on a lock, then the tool runs but its answer is held until the record commits", async () => {
    const runId = await startRun();
    const client = await clientOfRun(runId);
    await holder.query('BEGIN');
    let released = false;
    let pending: Promise<unknown>;
    {
      try {
        await holder.query('SELECT id FROM runs WHERE id = $1 FOR UPDATE', [runId]);
        pending = client.callTool({ name: 'echo', arguments: { text: 'held' } });
        void pending.then(
          () => (released = true),
          () => (released = true),
        );
        await until('the server ran the tool', async () =>
          (await server.calls()).some((call) => call.args.text === 'held'),
        );
        // The server answered at once; its answer stays with the daemon while the record waits.
        await sleep(300);
        expect(released).toBe(false);
        const { rows } = await holder.query('SELECT count(*)::int AS n FROM steps WHERE run_id = $1', [runId]);
        expect(rows[0].n).toBe(0);
        await holder.query('COMMIT');
      } finally {
        await holder.query('ROLLBACK').catch(() => {});
      }
      expect(await pending).toMatchObject({ content: [{ text: 'held' }] });
    }
  });

  it('when tool calls passed, then /metrics counts them by server, tool and outcome, with their durations', async () => {
    const text = await (await fetch(`${api.url}/metrics`)).text();
    const samples = parseMetrics(text);
    const count = (tool: string, outcome: string) =>
      samples.find(
        (sample) =>
          sample.name === 'runguard_tool_calls_total' &&
          sample.labels.server === 'fx' &&
          sample.labels.tool === tool &&
          sample.labels.outcome === outcome,
      )?.value ?? 0;
    expect(count('fx.echo', 'completed')).toBeGreaterThanOrEqual(1);
    expect(count('fx.fail', 'failed')).toBe(1);
    expect(count('fx.delete_file', 'denied')).toBeGreaterThanOrEqual(3);
    expect(
      samples.find(
        (sample) =>
          sample.name === 'runguard_tool_call_duration_seconds_count' && sample.labels.outcome === 'completed',
      )?.value,
    ).toBeGreaterThanOrEqual(1);
  });

  it('when the client cancels a tool call, then its step ends FAILED', async () => {
    const runId = await startRun();
    const client = await clientOfRun(runId);
    const abort = new AbortController();
    const pending = client.callTool({ name: 'wait', arguments: {} }, undefined, { signal: abort.signal });
    await until('the server runs the call', () => serverSaw('wait', () => true));
    abort.abort();
    await expect(pending).rejects.toThrow();
    await finished(runId, 1);
    expect((await toolSteps(runId))[0]).toMatchObject({ status: 'FAILED', output_data: { error: 'CANCELLED' } });
  });
});
