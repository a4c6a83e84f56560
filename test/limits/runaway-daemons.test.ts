/**
 * Runaway limits across real daemons (issue #39): two `runguard start` processes on one Postgres
 * (with one Redis, or none) admit exactly `max_steps` of parallel steps in one run and exactly
 * `user_steps_per_minute` of a user's racing steps. And the done-when: `runguard exec
 * --max-steps 20 -- <an agent stuck in a loop>` stops the agent at its 20th call with a message
 * that says why, and the run's record shows it. Runs the built dist/: `npm run build` first.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemonProcess, PACKAGE_ROOT, type DaemonProcess } from '../support/daemon-process.js';
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { caller, type Caller } from '../support/harness.js';
import { runCli } from '../support/daemon.js';
import { postgresDb } from '../../src/store/db.js';
import { createApiKey, createWorkspace } from '../../src/store/workspaces.js';

const BIN = join(PACKAGE_ROOT, 'bin', 'runguard');
const LOOP_AGENT = join(PACKAGE_ROOT, 'test', 'fixtures', 'loop-agent.mjs');

describe.each(['postgres+redis', 'postgres+sql'] as const)('two daemons on %s', (backend) => {
  let upstream: FakeUpstream;
  let daemonA: DaemonProcess;
  let daemonB: DaemonProcess;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    const env = { RUNGUARD_OPENAI_UPSTREAM: upstream.url, RUNGUARD_ANTHROPIC_UPSTREAM: upstream.url };
    const redis = backend === 'postgres+sql' ? { redisUrl: '' } : {};
    daemonA = await startDaemonProcess({ env, ...redis });
    daemonB = await startDaemonProcess({ env, sharing: daemonA, ...redis });
    await daemonA.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
      input_cost_per_token: 0.000001,
      output_cost_per_token: 0.000004,
    });
  }, 60_000);
  afterAll(async () => {
    await daemonB?.close();
    await daemonA?.close();
    await upstream?.close();
  });

  it('when 20 steps of one run race through two daemons against max_steps 10, then exactly 10 are allowed', async () => {
    const run = (await daemonA.request('POST', '/v1/runs', { user_id: 'racer', limits: { max_steps: 10 } })).body;
    const steps = await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        (index % 2 === 0 ? daemonA : daemonB).request('POST', `/v1/runs/${run.id}/steps`, {
          type: 'TOOL_CALL',
          tool_name: 'search',
          sequence: index + 1,
          input_data: { page: index },
        }),
      ),
    );
    expect(steps.map((step) => step.status)).toEqual(Array(20).fill(201));
    const allowed = steps.filter((step) => step.body.status === 'ALLOWED');
    const blocked = steps.filter((step) => step.body.status === 'BLOCKED');
    expect(allowed).toHaveLength(10);
    expect(blocked.map((step) => step.body.decision.detail)).toEqual(Array(10).fill({ steps: 10, limit: 10 }));
    const detail = (await daemonB.request('GET', `/v1/runs/${run.id}`)).body;
    expect(detail.steps.filter((step: { status: string }) => step.status === 'ALLOWED')).toHaveLength(10);
  });

  it('when 20 proxied calls of one run race through two daemons against max_steps 10, then exactly 10 go upstream', async () => {
    const run = (await daemonA.request('POST', '/v1/runs', { user_id: 'proxied', limits: { max_steps: 10 } })).body;
    const marker = `race ${run.id}`;
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        fetch(`${(index % 2 === 0 ? daemonA : daemonB).url}/proxy/runs/${run.id}/openai/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: 'Bearer sk', 'x-runguard-key': daemonA.apiKey },
          body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: `${marker} ${index}` }] }),
        }).then(async (res) => ({ status: res.status, body: await res.text() })),
      ),
    );
    expect(answers.filter((answer) => answer.status === 200)).toHaveLength(10);
    const denied = answers.filter((answer) => answer.status === 403);
    expect(denied).toHaveLength(10);
    expect(denied[0]!.body).toContain('RUN_STEP_LIMIT_EXCEEDED (run step limit reached: 10 of 10 steps)');
    expect(upstream.requests.filter((request) => JSON.stringify(request.body).includes(marker))).toHaveLength(10);
  });

  it("when a user's steps race through two daemons and three runs, then exactly user_steps_per_minute are allowed", async () => {
    const { api } = await newWorkspaceVia(daemonA);
    expect((await api.request('PATCH', '/v1/workspace', { user_steps_per_minute: 7 })).status).toBe(200);
    const runs = await Promise.all(
      [1, 2, 3].map(async () => (await api.request('POST', '/v1/runs', { user_id: 'hasty' })).body),
    );
    const other = (await api.request('POST', '/v1/runs', { user_id: 'calm' })).body;
    const viaB = caller(daemonB.url, api.apiKey);
    const steps = await Promise.all(
      Array.from({ length: 30 }, (_, index) =>
        (index % 2 === 0 ? api : viaB).request('POST', `/v1/runs/${runs[index % 3].id}/steps`, {
          type: 'MODEL_CALL',
          model: 'gpt-4o-mini',
          sequence: Math.floor(index / 3) + 1,
        }),
      ),
    );
    expect(steps.map((step) => step.status)).toEqual(Array(30).fill(201));
    expect(steps.filter((step) => step.body.status === 'ALLOWED')).toHaveLength(7);
    const denied = steps.filter((step) => step.body.status === 'BLOCKED');
    expect(new Set(denied.map((step) => step.body.decision.reason))).toEqual(new Set(['USER_RATE_LIMITED']));
    expect(denied[0]!.body.decision.detail).toMatchObject({ steps_in_window: 7, limit: 7, window_s: 60 });
    // Another user's window is their own.
    const calm = await viaB.request('POST', `/v1/runs/${other.id}/steps`, { type: 'MODEL_CALL', sequence: 1 });
    expect(calm.body.status).toBe('ALLOWED');
  });

  it('when runguard limits set is given the runaway limits, then the workspace holds them, and none turns one off', async () => {
    const { api } = await newWorkspaceVia(daemonA);
    const env = { RUNGUARD_URL: daemonB.url, RUNGUARD_API_KEY: api.apiKey };
    // A refused value changes nothing: it is tried beside the first change.
    const [set, bad] = await Promise.all([
      runCli(
        [
          'limits',
          'set',
          '--run-max-steps',
          '40',
          '--run-max-cost',
          '1.25',
          '--run-max-identical-calls',
          '3',
          '--user-steps-per-minute',
          '90',
          '--json',
        ],
        env,
      ),
      runCli(['limits', 'set', '--run-max-steps', '0'], env),
    ]);
    expect(set.stderr).toBe('');
    expect(JSON.parse(set.stdout)).toMatchObject({
      run_max_steps: 40,
      run_max_cost_usd: 1.25,
      run_max_identical_calls: 3,
      user_steps_per_minute: 90,
    });
    const off = await runCli(['limits', 'set', '--run-max-steps', 'none', '--user-steps-per-minute', 'none'], env);
    expect(off.code).toBe(0);
    expect(off.stdout).toMatch(/steps per run\s+off/);
    expect(off.stdout).toMatch(/cost per run\s+\$1\.25/);
    expect((await api.request('GET', '/v1/workspace')).body).toMatchObject({
      run_max_steps: null,
      user_steps_per_minute: null,
      run_max_identical_calls: 3,
    });
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("must be a whole number of at least 1, or 'none'.");
  });

  it('when exec is given a bad limit, then it says so and starts nothing', async () => {
    const result = await execCommand(daemonA, ['--user', 'x', '--max-cost', 'lots', '--', process.execPath, '-e', '']);
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain('--max-cost wants an amount in USD (e.g. 0.50), got "lots"');
  });

  it('when exec --max-steps 20 wraps an agent stuck in a loop, then it stops at the 20th call saying why, and the run shows it', async () => {
    const result = await execCommand(daemonA, [
      '--user',
      'looper',
      '--max-steps',
      '20',
      '--',
      process.execPath,
      LOOP_AGENT,
    ]);
    expect(result.status).toBe(1);
    const why = 'RUN_STEP_LIMIT_EXCEEDED (run step limit reached: 20 of 20 steps)';
    // The agent's own SDK error names the rule and its numbers...
    expect(result.stderr).toContain(`loop-agent: stopped after 20 calls: 403 runguard denied this model call: ${why}.`);
    // ...and exec's summary says it again.
    expect(result.stderr).toMatch(
      /runguard: run (\S+) FAILED \(exit 1\) in .*: 21 calls, .*, 1 denied \(RUN_STEP_LIMIT_EXCEEDED: run step limit reached: 20 of 20 steps\)\n/,
    );
    const runId = /runguard: run (\S+) FAILED/.exec(result.stderr)![1]!;
    const run = (await daemonB.request('GET', `/v1/runs/${runId}`)).body;
    expect(run.status).toBe('FAILED');
    expect(run.limits).toEqual({ max_steps: 20, max_cost_usd: null, max_identical_calls: null });
    expect(run.steps).toHaveLength(21);
    expect(run.steps.slice(0, 20).every((step: { status: string }) => step.status === 'COMPLETED')).toBe(true);
    expect(run.steps[20]).toMatchObject({
      sequence: 21,
      status: 'BLOCKED',
      decision: { outcome: 'DENY', reason: 'RUN_STEP_LIMIT_EXCEEDED', detail: { steps: 20, limit: 20 } },
    });
  }, 60_000);
});

/** Another workspace on the daemons' database, with a key of its own. */
async function newWorkspaceVia(daemon: DaemonProcess): Promise<{ api: Caller & { apiKey: string } }> {
  const db = postgresDb({ connectionString: daemon.databaseUrl, max: 1 });
  try {
    const workspace = await createWorkspace(db, 'runaway', 'scale');
    const { apiKey } = await createApiKey(db, workspace.id);
    return { api: { ...caller(daemon.url, apiKey), apiKey } };
  } finally {
    await db.close();
  }
}

function execCommand(daemon: DaemonProcess, args: string[]): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, 'exec', ...args], {
      cwd: PACKAGE_ROOT,
      env: { ...process.env, RUNGUARD_URL: daemon.url, RUNGUARD_API_KEY: daemon.apiKey, OPENAI_API_KEY: '' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('exit', (status) => resolve({ status, stderr }));
  });
}
