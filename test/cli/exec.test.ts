/**
 * `runguard exec` as a user runs it: the real bin/runguard (built to dist/) starts a daemon on
 * Postgres and Redis, and wraps an unmodified agent script whose SDKs only read OPENAI_BASE_URL
 * and ANTHROPIC_BASE_URL. Needs `npx tsc -p tsconfig.json` first (npm test does it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completionTokensFor, DEFAULT_REPLY, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { caller, type Caller } from '../support/harness.js';
import { createTestDatabase, REDIS_URL, testKeyPrefix, type TestDatabase } from '../support/services.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const BIN = join(ROOT, 'bin/runguard');
const AGENT = join(ROOT, 'test/fixtures/agent.mjs');

let upstream: FakeUpstream;
let database: TestDatabase;
let dataDir: string;
let daemon: ChildProcess;
let daemonOutput = '';
let url: string;
let apiKey: string;
let api: Caller;

beforeAll(async () => {
  if (!existsSync(join(ROOT, 'dist/cli/main.js'))) throw new Error('Build first: npx tsc -p tsconfig.json');
  [upstream, database, dataDir] = await Promise.all([
    startFakeUpstream(), createTestDatabase(), mkdtemp(join(tmpdir(), 'rg-exec-')),
  ]);
  daemon = spawn(process.execPath, [BIN, 'start', '--port', '0', '--data-dir', dataDir], {
    env: {
      ...process.env, DATABASE_URL: database.url, REDIS_URL, RUNGUARD_REDIS_KEY_PREFIX: testKeyPrefix(),
      RUNGUARD_OPENAI_UPSTREAM: upstream.url, RUNGUARD_ANTHROPIC_UPSTREAM: upstream.url, RUNGUARD_LOG_LEVEL: 'info',
      RUNGUARD_API_KEY: '',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  daemon.stderr!.on('data', (c) => (daemonOutput += c));
  url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`daemon did not start: ${daemonOutput}`)), 20_000);
    daemon.stdout!.on('data', (chunk) => {
      daemonOutput += chunk;
      const line = daemonOutput.split('\n').find((l) => l.includes('"runguard listening"'));
      if (line) {
        clearTimeout(timer);
        resolve(JSON.parse(line).url);
      }
    });
    daemon.once('exit', (code) => reject(new Error(`daemon exited ${code}: ${daemonOutput}`)));
  });
  apiKey = (await readFile(join(dataDir, 'api-key'), 'utf8')).trim();
  api = caller(url, apiKey);
  const prices = { input_cost_per_token: 0.000001, output_cost_per_token: 0.000004 };
  await api.request('PUT', '/v1/model-pricing/gpt-4o-mini', prices);
  await api.request('PUT', '/v1/model-pricing/claude-test-1', prices);
});

afterAll(async () => {
  if (daemon && daemon.exitCode === null) {
    daemon.kill('SIGTERM');
    await new Promise((r) => daemon.once('exit', r));
  }
  await upstream?.close();
  await database?.drop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

interface Exec {
  status: number | null;
  stdout: string;
  stderr: string;
}

function exec(args: string[], env: Record<string, string> = {}, onSpawn?: (child: ChildProcess) => void): Promise<Exec> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, 'exec', ...args], {
      cwd: ROOT,
      env: { ...process.env, RUNGUARD_URL: url, RUNGUARD_API_KEY: apiKey, OPENAI_API_KEY: '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.once('exit', (status) => resolve({ status, stdout, stderr }));
    onSpawn?.(child);
  });
}

async function runsOf(userId: string): Promise<any[]> {
  const list = (await api.request('GET', `/v1/runs?user_id=${userId}`)).body;
  return Promise.all(list.items.map(async (r: any) => (await api.request('GET', `/v1/runs/${r.id}`)).body));
}

/** Steps are recorded right after each answer; give the last one a moment to land. */
async function settledRunOf(userId: string): Promise<any> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const [run] = await runsOf(userId);
    // The run's totals and its steps are read by two queries: settled means they agree.
    const counted = run?.steps.reduce((n: number, s: any) => n + (s.prompt_tokens ?? 0) + (s.completion_tokens ?? 0), 0);
    if (run && run.steps.every((s: any) => s.status !== 'ALLOWED') && run.total_tokens === counted) return run;
    if (Date.now() > deadline) throw new Error(`run of ${userId} did not settle`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('runguard exec', () => {
  it('when the agent succeeds, then exec exits 0 and the run is COMPLETED with every call a priced step', async () => {
    const result = await exec(['--user', 'exec-ok', '--metadata', 'ticket=42', 'team=ops', '--', process.execPath, AGENT, '0']);
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(result.stdout).toBe(`${DEFAULT_REPLY} | ${DEFAULT_REPLY}\n`);
    const run = await settledRunOf('exec-ok');
    expect(run).toMatchObject({ status: 'COMPLETED', metadata: { ticket: '42', team: 'ops' }, step_count: 3 });
    expect(run.steps.map((s: any) => [s.sequence, s.model, s.status, s.input_data.path, s.input_data.stream])).toEqual([
      [1, 'gpt-4o-mini', 'COMPLETED', '/v1/chat/completions', false],
      [2, 'gpt-4o-mini', 'COMPLETED', '/v1/chat/completions', true],
      [3, 'claude-test-1', 'COMPLETED', '/v1/messages', false],
    ]);
    for (const step of run.steps) {
      expect(step.completion_tokens).toBe(completionTokensFor(DEFAULT_REPLY));
      expect(step.prompt_tokens).toBeGreaterThan(0);
      expect(step.cost_usd).toBeGreaterThan(0);
    }
    expect(run.total_cost_usd).toBeGreaterThan(0);
    // The agent's own provider keys went upstream untouched, and nothing of runguard's did.
    const sent = upstream.requests.slice(-3);
    expect(sent.map((r) => r.headers.authorization ?? r.headers['x-api-key'])).toEqual([
      'Bearer sk-agent-own-key-0123456789', 'Bearer sk-agent-own-key-0123456789', expect.stringContaining('sk-ant-agent-own-key-0123'),
    ]);
    for (const r of sent) {
      expect(Object.keys(r.headers).filter((h) => h.startsWith('x-runguard'))).toEqual([]);
      expect(JSON.stringify(r.headers)).not.toContain(apiKey);
    }
  });

  it('when the agent exits non-zero, then exec exits with that status and the run is FAILED', async () => {
    const result = await exec(['--user', 'exec-fail', '--', process.execPath, AGENT, '7']);
    expect(result.status).toBe(7);
    const run = await settledRunOf('exec-fail');
    expect(run.status).toBe('FAILED');
    expect(run.step_count).toBe(3);
  });

  it('when the user is blocked, then exec prints the reason, exits 3 and never starts the command', async () => {
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    await client.query(`INSERT INTO sdk_users (workspace_id, user_id, blocked) SELECT id, 'exec-blocked', true FROM workspaces`);
    await client.end();
    const marker = join(dataDir, 'blocked-marker');
    const before = upstream.requests.length;
    const result = await exec(['--user', 'exec-blocked', '--', process.execPath, AGENT, '0', marker]);
    expect(result.status).toBe(3);
    expect(result.stderr).toContain('USER_BLOCKED');
    expect(existsSync(marker)).toBe(false);
    expect(upstream.requests.length).toBe(before);
    expect((await runsOf('exec-blocked')).map((r) => r.status)).toEqual(['BLOCKED']);
  });

  it('when exec is sent SIGTERM, then the agent gets it, and the run ends FAILED with status 143', async () => {
    const marker = join(dataDir, 'wait-marker');
    const result = await exec(['--user', 'exec-signal', '--', process.execPath, AGENT, '0', marker, '--wait'], {}, (child) => {
      const poll = setInterval(() => {
        if (existsSync(marker)) {
          clearInterval(poll);
          child.kill('SIGTERM');
        }
      }, 20);
    });
    expect(result.status).toBe(143);
    expect((await runsOf('exec-signal')).map((r) => r.status)).toEqual(['FAILED']);
  });

  it('when no API key is given, then exec uses the daemon\'s key file in the data dir', async () => {
    const result = await exec(['--user', 'exec-keyfile', '--', process.execPath, AGENT, '0'], {
      RUNGUARD_API_KEY: '', RUNGUARD_DATA_DIR: dataDir,
    });
    expect(result.status).toBe(0);
    expect((await settledRunOf('exec-keyfile')).status).toBe('COMPLETED');
  });

  it('when the daemon has served all of the above, then its logs hold no key and no proxy token', async () => {
    // The bootstrap banner shows the key once on the terminal by design: look at the log lines only.
    const logs = daemonOutput.split('\n').filter((l) => l.startsWith('{')).join('\n');
    expect(logs).toContain('/proxy/t/[redacted]/openai/v1/chat/completions');
    for (const secret of [apiKey, 'sk-agent-own-key', 'sk-ant-agent-own-key', 'rgp_']) expect(logs).not.toContain(secret);
  });
});
