/**
 * The coding agents people run, as they run them: the real `claude` (@anthropic-ai/claude-code)
 * and `codex` (@openai/codex) binaries under `runguard exec`, with no flag or config of runguard's,
 * offline against a loopback fake provider. Every model call is a priced step of the run (Codex's
 * over its Responses WebSocket); what is not a model call (Claude Code's `HEAD /api/hello`) is no
 * step; a denial mid-session (the second call, over the run's budget) reaches the agent as its
 * provider's error. Needs the build (`npx tsc -p tsconfig.json`) and installs the CLIs on first use.
 */
import { spawn } from 'node:child_process';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentClis, offlineAgentEnv, type AgentClis } from '../support/agent-clis.js';
import { BIN, spawnDaemonOnPostgres } from '../support/daemon.js';
import { DEFAULT_REPLY, promptTokensFor, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { caller, type Caller } from '../support/harness.js';
import { REDIS_URL, testKeyPrefix } from '../support/services.js';

/** A prompt with this word gets a tool call first, answered with text once the tool's result came. */
const USE_A_TOOL = 'USE-A-TOOL';
const PRICES = { input_cost_per_token: 0.000001, output_cost_per_token: 0.000004 };
const CLAUDE_MODEL = 'claude-agent-test-1';
/** A model Codex knows (it sends its tools for it). */
const CODEX_MODEL = 'gpt-5';

let clis: AgentClis;
let upstream: FakeUpstream;
let daemon: Awaited<ReturnType<typeof spawnDaemonOnPostgres>>;
let api: Caller;
let agentEnv: Record<string, string>;
let agentHome: string;

/** The last message of an Anthropic request, or the last input item of a Responses request, is a tool's result. */
function hasToolResult(body: Record<string, unknown>): boolean {
  const last = (list: unknown) =>
    Array.isArray(list) ? (list.at(-1) as Record<string, unknown> | undefined) : undefined;
  const message = last(body.messages);
  if (message) return Array.isArray(message.content) && message.content.some((b: any) => b?.type === 'tool_result');
  return last(body.input)?.type === 'function_call_output';
}

beforeAll(async () => {
  [clis, upstream, { env: agentEnv, home: agentHome }] = await Promise.all([
    agentClis(),
    startFakeUpstream({
      toolCallFor: (body) => {
        if (!JSON.stringify(body).includes(USE_A_TOOL) || hasToolResult(body)) return null;
        return body.messages
          ? { name: 'Read', input: { file_path: join(agentHome, 'notes.txt') } }
          : { name: 'exec_command', input: { cmd: 'true' } };
      },
    }),
    offlineAgentEnv(),
  ]);
  await writeFile(join(agentHome, 'notes.txt'), 'nothing to see\n');
  daemon = await spawnDaemonOnPostgres({
    env: {
      REDIS_URL,
      RUNGUARD_REDIS_KEY_PREFIX: testKeyPrefix(),
      RUNGUARD_OPENAI_UPSTREAM: upstream.url,
      RUNGUARD_ANTHROPIC_UPSTREAM: upstream.url,
    },
  });
  api = caller(daemon.url, daemon.apiKey);
  for (const model of [CLAUDE_MODEL, CODEX_MODEL]) {
    expect((await api.request('PUT', `/v1/model-pricing/${model}`, PRICES)).status).toBe(200);
  }
}, 600_000);

afterAll(async () => {
  await daemon?.close();
  await upstream?.close();
  if (agentHome) await rm(agentHome, { recursive: true, force: true });
});

interface Exec {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** `runguard exec <args>` with the agents' offline environment and no provider variable of ours. */
function exec(args: string[]): Promise<Exec> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, 'exec', ...args], {
      cwd: agentHome,
      env: {
        PATH: process.env.PATH ?? '',
        ...agentEnv,
        RUNGUARD_URL: daemon.url,
        RUNGUARD_API_KEY: daemon.apiKey!,
      },
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

/** What the fake provider answered a model call of `body`, at PRICES. */
function expectedCost(body: unknown, completionTokens: number): number {
  return promptTokensFor(body) * PRICES.input_cost_per_token + completionTokens * PRICES.output_cost_per_token;
}

const modelCallsSince = (from: number) =>
  upstream.requests
    .slice(from)
    .filter((r) => r.method === 'POST' && /\/(messages|responses)$/.test(r.path.split('?')[0]!));

describe('coding agents under runguard exec', () => {
  it('claude -p: one priced step, its connectivity check no step', async () => {
    const from = upstream.requests.length;
    const result = await exec(['--user', 'claude-ok', '--', clis.claude, '-p', 'say hi', '--model', CLAUDE_MODEL]);
    expect(result.stderr).toContain('COMPLETED');
    expect(result.status).toBe(0);
    expect(result.stdout).toContain(DEFAULT_REPLY);
    const run = await settledRunOf('claude-ok');
    const [call] = modelCallsSince(from);
    expect(run.steps.map((s: any) => [s.type, s.status, s.model, s.input_data.path])).toEqual([
      ['MODEL_CALL', 'COMPLETED', CLAUDE_MODEL, '/v1/messages'],
    ]);
    // What it sent besides (its `HEAD /api/hello`) reached the provider, unrecorded.
    expect(upstream.requests.slice(from).some((r) => r.method === 'HEAD')).toBe(true);
    const [step] = run.steps;
    expect(step.prompt_tokens).toBe(promptTokensFor(call!.body));
    expect(step.cost_usd).toBeCloseTo(expectedCost(call!.body, step.completion_tokens), 12);
    expect(run.total_cost_usd).toBeCloseTo(step.cost_usd, 12);
  });

  it('codex exec: through the run over its Responses WebSocket, with no flag of the user', async () => {
    const from = upstream.requests.length;
    const sockets = upstream.sockets.length;
    const result = await exec([
      '--user',
      'codex-ok',
      '--',
      clis.codex,
      'exec',
      '--skip-git-repo-check',
      '-m',
      CODEX_MODEL,
      'say hi',
    ]);
    expect(result.status).toBe(0);
    expect(result.stdout).toContain(DEFAULT_REPLY);
    const run = await settledRunOf('codex-ok');
    // Every model call went over one WebSocket, each `response.create` a priced step (Codex may
    // send one to warm the prompt up first); nothing over HTTPS.
    expect(upstream.sockets.length).toBe(sockets + 1);
    const creates = upstream.sockets.at(-1)!.messages.filter((m: any) => m.type === 'response.create');
    expect(creates.length).toBeGreaterThan(0);
    expect(run.steps.map((s: any) => [s.type, s.status, s.model, s.input_data.path])).toEqual(
      creates.map(() => ['MODEL_CALL', 'COMPLETED', CODEX_MODEL, '/v1/responses']),
    );
    for (const step of run.steps) expect(step.cost_usd).toBeGreaterThan(0);
    expect(modelCallsSince(from)).toEqual([]);
  });

  it("claude: the second call, over the run's budget, is denied and claude shows the provider's error", async () => {
    const result = await exec([
      '--user',
      'claude-denied',
      '--max-cost',
      '0.000001',
      '--',
      clis.claude,
      '-p',
      `${USE_A_TOOL}: read notes.txt`,
      '--model',
      CLAUDE_MODEL,
    ]);
    const run = await settledRunOf('claude-denied');
    expect(run.steps.map((s: any) => [s.status, s.decision.reason])).toEqual([
      ['COMPLETED', null],
      ['BLOCKED', 'RUN_BUDGET_EXCEEDED'],
    ]);
    expect(result.status).not.toBe(0);
    expect(result.stdout + result.stderr).toContain('runguard denied this model call: RUN_BUDGET_EXCEEDED');
  });

  it("codex: a call over the run's budget is denied on its WebSocket and codex shows the provider's error", async () => {
    const sockets = upstream.sockets.length;
    const result = await exec([
      '--user',
      'codex-denied',
      '--max-cost',
      '0.000001',
      '--',
      clis.codex,
      'exec',
      '--skip-git-repo-check',
      '-m',
      CODEX_MODEL,
      `${USE_A_TOOL}: run true`,
    ]);
    const run = await settledRunOf('codex-denied');
    const [first, ...denied] = run.steps.map((s: any) => [s.status, s.decision.reason]);
    expect(first).toEqual(['COMPLETED', null]);
    expect(denied.length).toBeGreaterThan(0);
    expect(new Set(denied.map((d: unknown[]) => d.join()))).toEqual(new Set(['BLOCKED,RUN_BUDGET_EXCEEDED']));
    // Only the allowed call reached the provider.
    const creates = upstream.sockets
      .slice(sockets)
      .flatMap((socket) => socket.messages.filter((m: any) => m.type === 'response.create'));
    expect(creates).toHaveLength(1);
    expect(result.status).not.toBe(0);
    expect(result.stdout + result.stderr).toContain('runguard denied this model call: RUN_BUDGET_EXCEEDED');
  });
});
