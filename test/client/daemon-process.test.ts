/**
 * The client SDK against the daemon as users run it: `node bin/runguard start` in a child process
 * (Postgres and Redis), stopped and started again under the client's feet, and the README example
 * run unchanged by `node`, importing `runguard/client` by its package name.
 * Needs the build (`npx tsc -p tsconfig.json`, as `npm test` does).
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ts from 'typescript';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GuardClient, type Run, type RunSummary } from '../../clients/typescript/src/index.js';
import { PACKAGE_ROOT, startDaemonProcess, type DaemonProcess } from '../support/daemon-process.js';
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { startHttpRelay, type HttpRelay } from '../support/http-relay.js';

const RUN_START = /^\/v1\/runs\/?$/;
const STEP_UPDATE = /^\/v1\/runs\/[^/]+\/steps\/[^/]+$/;
const README_AGENT = join(import.meta.dirname, 'fixtures', 'readme-agent.ts');

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let daemon: DaemonProcess;

beforeAll(async () => {
  daemon = await startDaemonProcess();
});
afterAll(async () => {
  await daemon?.close();
});

const runsOf = async (userId: string): Promise<RunSummary[]> => {
  const res = await daemon.request<{ items: RunSummary[] }>('GET', `/v1/runs?user_id=${encodeURIComponent(userId)}`);
  expect(res.status).toBe(200);
  return res.body.items;
};
const detailOf = async (runId: string): Promise<Run> => (await daemon.request<Run>('GET', `/v1/runs/${runId}`)).body;

describe('retries across a daemon restart', () => {
  let guard: GuardClient | undefined;
  let relay: HttpRelay | undefined;

  afterEach(async () => {
    await guard?.close();
    await relay?.close();
    guard = relay = undefined;
    if (!daemon.running) await daemon.start();
  });

  /**
   * A retrying client behind a new relay that loses the answer to the next `method path`: as it
   * does, the daemon, which has committed the request, is killed and started again. `restarted`
   * resolves once the daemon is back. Both are closed after the test.
   */
  async function crashOnLostAnswer(method: string, path: RegExp) {
    const lossy = await startHttpRelay(daemon.url);
    const client = new GuardClient({ apiKey: daemon.apiKey, baseUrl: lossy.url, maxRetries: 6 });
    [relay, guard] = [lossy, client];
    let restarted: Promise<void> | undefined;
    lossy.dropAnswer({
      method,
      path,
      async beforeDrop() {
        await daemon.kill('SIGKILL');
        restarted = daemon.start();
      },
    });
    return {
      client,
      relay: lossy,
      async restarted() {
        await restarted;
      },
    };
  }

  it('when the daemon is down as a run starts and comes back on the same port, then exactly one run is recorded', async () => {
    guard = new GuardClient({ apiKey: daemon.apiKey, baseUrl: daemon.url, maxRetries: 6 });
    await daemon.kill('SIGTERM');
    let calls = 0;

    const running = guard.run('restart-down', async (run) => {
      await run.toolCall(() => calls++, { toolName: 'search' });
      return run.id;
    });
    await sleep(200); // the first attempts are refused
    await daemon.start();
    const runId = await running;

    expect(calls).toBe(1);
    expect((await runsOf('restart-down')).map((r) => [r.id, r.status, r.step_count])).toEqual([
      [runId, 'COMPLETED', 1],
    ]);
  });

  it('when the daemon dies after committing a run start and before answering, then the retry to the restarted daemon gets that run', async () => {
    const crash = await crashOnLostAnswer('POST', RUN_START);

    const runId = await crash.client.run('restart-start', (run) => run.id);
    await crash.restarted();

    expect((await runsOf('restart-start')).map((r) => [r.id, r.status])).toEqual([[runId, 'COMPLETED']]);
    const starts = crash.relay.requestsTo('POST', RUN_START);
    // Lost answer, then refused while the daemon was down (maybe), then the replay: one key throughout.
    expect(new Set(starts.map((r) => r.idempotencyKey)).size).toBe(1);
    expect(starts[0]!.outcome).toBe('answer-dropped');
    expect(starts.at(-1)).toMatchObject({ outcome: 'relayed', status: 201 });
  });

  it('when the daemon dies mid-run after committing a step update, then the run completes once with that step finished once', async () => {
    await daemon.request('PUT', '/v1/model-pricing/restart-model', {
      input_cost_per_token: 0.001,
      output_cost_per_token: 0.002,
    });
    const crash = await crashOnLostAnswer('PATCH', STEP_UPDATE);
    let calls = 0;

    const runId = await crash.client.run('restart-patch', async (run) => {
      await run.modelCall(
        () => {
          calls++;
          return { usage: { prompt_tokens: 100, completion_tokens: 50 } };
        },
        { model: 'restart-model', tokenExtractor: (r) => [r.usage.prompt_tokens, r.usage.completion_tokens] as const },
      );
      await run.toolCall(() => 'after the restart', { toolName: 'search' });
      return run.id;
    });
    await crash.restarted();

    expect(calls).toBe(1);
    const run = await detailOf(runId);
    expect(run).toMatchObject({ status: 'COMPLETED', total_tokens: 150, total_cost_usd: 0.2 });
    expect(run.steps.map((s) => [s.sequence, s.type, s.status])).toEqual([
      [1, 'MODEL_CALL', 'COMPLETED'],
      [2, 'TOOL_CALL', 'COMPLETED'],
    ]);
    expect(await runsOf('restart-patch')).toHaveLength(1);
  });
});

describe('the README example, run unchanged by node against the daemon', () => {
  let upstream: FakeUpstream;
  let consumer: string;
  let agentSource: string;

  beforeAll(async () => {
    upstream = await startFakeUpstream({ promptTokens: 40, completionTokens: 10 });
    await daemon.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
      input_cost_per_token: 1.5e-7,
      output_cost_per_token: 6e-7,
    });
    agentSource = ts.transpileModule(await readFile(README_AGENT, 'utf8'), {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    }).outputText;
    // A project that installed runguard and openai: node_modules links, as `npm install <dir>` makes.
    consumer = await mkdtemp(join(tmpdir(), 'rg-consumer-'));
    await writeFile(join(consumer, 'package.json'), JSON.stringify({ name: 'agent', private: true, type: 'module' }));
    await mkdir(join(consumer, 'node_modules'));
    await symlink(PACKAGE_ROOT, join(consumer, 'node_modules', 'runguard'), 'dir');
    await symlink(
      await realpath(join(PACKAGE_ROOT, 'node_modules', 'openai')),
      join(consumer, 'node_modules', 'openai'),
      'dir',
    );
    await writeFile(join(consumer, 'agent.mjs'), agentSource);
  });
  afterAll(async () => {
    await upstream?.close();
    if (consumer) await rm(consumer, { recursive: true, force: true });
  });

  /** Runs the agent with the environment an operator would set; `script` null feeds it on stdin. */
  const runAgent = (cwd: string, script: string | null) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const args = script ? [script] : ['--input-type=module'];
      const child = spawn(process.execPath, args, {
        cwd,
        env: {
          PATH: process.env.PATH,
          RUNGUARD_API_KEY: daemon.apiKey,
          RUNGUARD_BASE_URL: daemon.url,
          OPENAI_API_KEY: 'sk-test-not-a-real-key',
          OPENAI_BASE_URL: `${upstream.url}/v1`,
        },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, stdout, stderr }));
      child.stdin.end(script ? '' : agentSource);
    });

  it('when the example is type-checked (strict) against the built runguard/client types, then it compiles', () => {
    const program = ts.createProgram([README_AGENT], {
      strict: true,
      noEmit: true,
      noUncheckedIndexedAccess: true,
      skipLibCheck: true,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      lib: ['lib.es2023.d.ts'],
      types: ['node'],
    });
    const diagnostics = ts
      .getPreEmitDiagnostics(program)
      .map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    expect(diagnostics).toEqual([]);
  });

  it('when an installed runguard runs the example, then it prints the answer and the daemon holds the guarded run', async () => {
    const before = (await runsOf('user-123')).length;
    const result = await runAgent(consumer, 'agent.mjs');
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ answer: ['result for: Hello from the fake upstream.'] });

    const runs = await runsOf('user-123');
    expect(runs).toHaveLength(before + 1);
    const run = await detailOf(runs[0]!.id);
    expect(run).toMatchObject({ status: 'COMPLETED', metadata: { ticket: 42 }, total_tokens: 50 });
    expect(
      run.steps.map((s) => [
        s.sequence,
        s.type,
        s.model ?? s.tool_name,
        s.status,
        s.prompt_tokens,
        s.completion_tokens,
        s.cost_usd,
      ]),
    ).toEqual([
      [1, 'MODEL_CALL', 'gpt-4o-mini', 'COMPLETED', 40, 10, 0.000012],
      [2, 'TOOL_CALL', 'search', 'COMPLETED', null, null, null],
    ]);
    expect(run.steps[0]!.input_data).toEqual({ prompt: 'Which guardrails does runguard enforce?' });
    expect(run.steps[1]!.input_data).toMatchObject({ q: { object: 'chat.completion', usage: { prompt_tokens: 40 } } });
    expect(upstream.requests.at(-1)).toMatchObject({ method: 'POST', path: '/v1/chat/completions' });
  });

  it('when the example runs from the package root, then runguard/client resolves to the package itself (self-reference)', async () => {
    const before = (await runsOf('user-123')).length;
    const result = await runAgent(PACKAGE_ROOT, null);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect((await runsOf('user-123')).length).toBe(before + 1);
  });

  it('when the user is blocked, then the example catches GuardBlockedError and the model is never called', async () => {
    // Through the API, as an operator would: a hand edit of the table is seen only once the
    // daemon's remembered state expires (2 s), as the README says.
    expect((await daemon.request('PUT', '/v1/users/user-123', { blocked: true })).status).toBe(200);
    try {
      const calls = upstream.requests.length;
      const result = await runAgent(consumer, 'agent.mjs');
      expect(result.code).toBe(3);
      expect(JSON.parse(result.stdout)).toMatchObject({
        blocked: 'USER_BLOCKED',
        reason: expect.stringContaining('user-123'),
      });
      expect(upstream.requests.length).toBe(calls);
      expect((await runsOf('user-123'))[0]!.status).toBe('BLOCKED');
    } finally {
      await daemon.request('PUT', '/v1/users/user-123', { blocked: false });
    }
  });
});
