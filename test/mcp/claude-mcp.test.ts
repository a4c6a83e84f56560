/**
 * Issue #50's "done when" with the real `claude` CLI: under `runguard exec`, offline against a
 * loopback fake Anthropic provider, with an `.mcp.json` whose server URL is
 * `${RUNGUARD_MCP_URL}/fx` (Claude Code expands it), the server being the official SDK's McpServer
 * behind Streamable HTTP. The fake model asks for the MCP tool (`mcp__fx__echo`, as a streamed
 * `tool_use`), then answers the tool's result with text. The call is a TOOL_CALL step of exec's run;
 * under a tool policy denying it, the server never sees it. Needs the build and installs the CLIs
 * on first use (test/support/agent-clis.ts).
 */
import { spawn } from 'node:child_process';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentClis, offlineAgentEnv, type AgentClis } from '../support/agent-clis.js';
import { BIN, spawnDaemonOnPostgres } from '../support/daemon.js';
import { DEFAULT_REPLY, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { caller, type Caller } from '../support/harness.js';
import { startMcpServer, type McpFixture } from '../support/mcp-fixture.js';
import { REDIS_URL, testKeyPrefix } from '../support/services.js';

const MODEL = 'claude-mcp-test-1';
/** Claude Code's name of the fixture server's `echo` tool, registered as `fx`. */
const MCP_TOOL = 'mcp__fx__echo';
const SAID = 'hello through runguard';

let clis: AgentClis;
let upstream: FakeUpstream;
let server: McpFixture;
let daemon: Awaited<ReturnType<typeof spawnDaemonOnPostgres>>;
let api: Caller;
let agentEnv: Record<string, string>;
let agentHome: string;

type Message = { role: string; content: unknown };
const lastMessage = (body: Record<string, unknown>) =>
  Array.isArray(body.messages) ? (body.messages.at(-1) as Message | undefined) : undefined;
/** The tool_result blocks of a Messages request's last message. */
const toolResults = (body: Record<string, unknown>): any[] => {
  const content = lastMessage(body)?.content;
  return Array.isArray(content) ? content.filter((block: any) => block?.type === 'tool_result') : [];
};

beforeAll(async () => {
  [clis, upstream, server, { env: agentEnv, home: agentHome }] = await Promise.all([
    agentClis(),
    startFakeUpstream({
      // The user's turn gets the MCP tool call; the turn carrying its result gets text.
      toolCallFor: (body) =>
        JSON.stringify(body).includes('USE-MCP') && toolResults(body).length === 0
          ? { name: MCP_TOOL, input: { text: SAID } }
          : null,
    }),
    startMcpServer(),
    offlineAgentEnv(),
  ]);
  await writeFile(
    join(agentHome, 'mcp.json'),
    JSON.stringify({ mcpServers: { fx: { type: 'http', url: '${RUNGUARD_MCP_URL}/fx' } } }),
  );
  daemon = await spawnDaemonOnPostgres({
    env: {
      REDIS_URL,
      RUNGUARD_REDIS_KEY_PREFIX: testKeyPrefix(),
      RUNGUARD_ANTHROPIC_UPSTREAM: upstream.url,
    },
  });
  api = caller(daemon.url, daemon.apiKey);
  expect((await api.request('POST', '/v1/mcp/servers', { name: 'fx', url: server.url })).status).toBe(201);
}, 600_000);

afterAll(async () => {
  await daemon?.close();
  await upstream?.close();
  await server?.close();
  if (agentHome) await rm(agentHome, { recursive: true, force: true });
});

/** `runguard exec --user <user> -- claude -p ...` with the MCP config and the tool allowed. */
function execClaude(user: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const args = [
    BIN,
    'exec',
    '--user',
    user,
    '--',
    clis.claude,
    '-p',
    'USE-MCP: echo a greeting',
    '--model',
    MODEL,
    '--mcp-config',
    join(agentHome, 'mcp.json'),
    '--strict-mcp-config',
    '--allowedTools',
    MCP_TOOL,
  ];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, args, {
      cwd: agentHome,
      env: { PATH: process.env.PATH ?? '', ...agentEnv, RUNGUARD_URL: daemon.url, RUNGUARD_API_KEY: daemon.apiKey! },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.once('exit', (status) => resolve({ status, stdout, stderr }));
  });
}

/** The user's one run, once every step's result is recorded. */
async function settledRunOf(userId: string): Promise<any> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const list = (await api.request<any>('GET', `/v1/runs?user_id=${userId}`)).body;
    const id = list.items[0]?.id;
    const run = id && (await api.request<any>('GET', `/v1/runs/${id}`)).body;
    if (run && run.status !== 'RUNNING' && run.steps.every((s: any) => s.status !== 'ALLOWED')) return run;
    if (Date.now() > deadline) throw new Error(`the run of ${userId} did not settle`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const modelCallsSince = (from: number) =>
  upstream.requests.slice(from).filter((r) => r.method === 'POST' && /\/messages$/.test(r.path.split('?')[0]!));

describe('claude with an .mcp.json on ${RUNGUARD_MCP_URL}', () => {
  it("claude -p: the MCP tool call is a completed TOOL_CALL step of exec's run", async () => {
    const from = upstream.requests.length;
    const result = await execClaude('claude-mcp-ok');
    expect(result.status, result.stderr).toBe(0);
    expect(result.stdout).toContain(DEFAULT_REPLY);
    expect(await server.calls()).toEqual([{ name: 'echo', args: { text: SAID } }]);
    // The tool's answer went back to the model.
    const results = modelCallsSince(from).flatMap((call) => toolResults(call.body as Record<string, unknown>));
    expect(JSON.stringify(results)).toContain(SAID);
    const run = await settledRunOf('claude-mcp-ok');
    const tools = run.steps.filter((s: any) => s.type === 'TOOL_CALL');
    expect(tools.map((s: any) => [s.tool_name, s.status])).toEqual([['fx.echo', 'COMPLETED']]);
    expect(run.steps.filter((s: any) => s.type === 'MODEL_CALL').length).toBeGreaterThanOrEqual(2);
  });

  it('a tool policy denying the tool: claude cannot call it and the server never sees the call', async () => {
    const denied = await api.request('PATCH', '/v1/workspace', { tool_policy: { deny: ['fx.echo'], allow: null } });
    expect(denied.status, JSON.stringify(denied.body)).toBe(200);
    const seen = (await server.calls()).length;
    const from = upstream.requests.length;
    await execClaude('claude-mcp-denied');
    expect((await server.calls()).length).toBe(seen);
    // The model's call of it came back to the model as a tool error.
    const results = modelCallsSince(from).flatMap((call) => toolResults(call.body as Record<string, unknown>));
    expect(results.length).toBeGreaterThan(0);
    expect(results.every((r: any) => r.is_error === true)).toBe(true);
    const run = await settledRunOf('claude-mcp-denied');
    expect(run.steps.filter((s: any) => s.type === 'TOOL_CALL' && s.status === 'COMPLETED')).toEqual([]);
  });
});
