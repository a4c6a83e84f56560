/**
 * `runguard exec` as a user runs it: the real bin/runguard (built to dist/) starts a daemon on
 * Postgres and Redis, and wraps an unmodified agent script whose SDKs only read OPENAI_BASE_URL
 * and ANTHROPIC_BASE_URL. Needs `npx tsc -p tsconfig.json` first (npm test does it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completionTokensFor, DEFAULT_REPLY, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { caller, type Caller } from '../support/harness.js';
import { startHttpRelay } from '../support/http-relay.js';
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
    startFakeUpstream(),
    createTestDatabase(),
    mkdtemp(join(tmpdir(), 'rg-exec-')),
  ]);
  daemon = spawn(process.execPath, [BIN, 'start', '--port', '0', '--data-dir', dataDir], {
    env: {
      ...process.env,
      DATABASE_URL: database.url,
      REDIS_URL,
      RUNGUARD_REDIS_KEY_PREFIX: testKeyPrefix(),
      RUNGUARD_OPENAI_UPSTREAM: upstream.url,
      RUNGUARD_ANTHROPIC_UPSTREAM: upstream.url,
      RUNGUARD_GOOGLE_UPSTREAM: upstream.url,
      RUNGUARD_LOG_LEVEL: 'info',
      RUNGUARD_API_KEY: '',
      XDG_CONFIG_HOME: dataDir,
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
  await api.request('PUT', '/v1/model-pricing/gemini-test-1', prices);
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

function exec(
  args: string[],
  env: Record<string, string> = {},
  onSpawn?: (child: ChildProcess) => void,
): Promise<Exec> {
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
    const counted = run?.steps.reduce(
      (n: number, s: any) => n + (s.prompt_tokens ?? 0) + (s.completion_tokens ?? 0),
      0,
    );
    if (run && run.steps.every((s: any) => s.status !== 'ALLOWED') && run.total_tokens === counted) return run;
    if (Date.now() > deadline) throw new Error(`run of ${userId} did not settle`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** The user's row of `runguard runs list`, as a newcomer reads it: its cells split on two spaces or more. */
function listedRun(userId: string): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, 'runs', 'list', '--user', userId], {
      cwd: ROOT,
      env: { ...process.env, RUNGUARD_URL: url, RUNGUARD_API_KEY: apiKey, NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.once('exit', (status) => {
      const row = stdout.split('\n').find((line) => line.includes(userId));
      if (status !== 0 || !row) reject(new Error(`runs list exited ${status}: ${stdout}`));
      else resolve(row.trim().split(/ {2,}/));
    });
  });
}

describe('runguard exec', () => {
  it('when the agent succeeds, then exec exits 0 and the run is COMPLETED with every call a priced step', async () => {
    const result = await exec([
      '--user',
      'exec-ok',
      '--metadata',
      'ticket=42',
      'team=ops',
      '--tag',
      'project=search',
      '--tag',
      'team=ops',
      '--',
      process.execPath,
      AGENT,
      '0',
    ]);
    expect(result.status).toBe(0);
    expect(result.stdout).toBe(`${DEFAULT_REPLY} | ${DEFAULT_REPLY}\n`);
    const run = await settledRunOf('exec-ok');
    expect(run).toMatchObject({
      status: 'COMPLETED',
      metadata: { ticket: '42', team: 'ops' },
      tags: { project: 'search', team: 'ops' },
      step_count: 3,
    });
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
    // One line of exec's own, on stderr, once the run is over: what it did and what it cost.
    expect(result.stderr).toMatch(
      new RegExp(
        `^runguard: run ${run.id} COMPLETED in [0-9.]+m?s: 3 calls, ${run.total_tokens} tokens, \\$0\\.\\d+\n$`,
      ),
    );
    // The agent's own provider keys went upstream untouched, and nothing of runguard's did.
    const sent = upstream.requests.slice(-3);
    expect(sent.map((r) => r.headers.authorization ?? r.headers['x-api-key'])).toEqual([
      'Bearer sk-agent-own-key-0123456789',
      'Bearer sk-agent-own-key-0123456789',
      expect.stringContaining('sk-ant-agent-own-key-0123'),
    ]);
    for (const r of sent) {
      expect(Object.keys(r.headers).filter((h) => h.startsWith('x-runguard'))).toEqual([]);
      expect(JSON.stringify(r.headers)).not.toContain(apiKey);
    }
  });

  it("when the agent is on Google's SDK, then GOOGLE_GEMINI_BASE_URL takes its Gemini calls into the run", async () => {
    const result = await exec([
      '--user',
      'exec-gemini',
      '--',
      process.execPath,
      join(ROOT, 'test/fixtures/gemini-agent.mjs'),
    ]);
    expect(result.stdout).toBe(`${DEFAULT_REPLY} | ${DEFAULT_REPLY}\n`);
    expect(result.status).toBe(0);
    const run = await settledRunOf('exec-gemini');
    expect(run.steps.map((s: any) => [s.model, s.status, s.input_data.provider, s.input_data.path])).toEqual([
      ['gemini-test-1', 'COMPLETED', 'google', '/v1beta/models/gemini-test-1:generateContent'],
      ['gemini-test-1', 'COMPLETED', 'google', '/v1beta/models/gemini-test-1:streamGenerateContent'],
    ]);
    for (const step of run.steps) expect(step.cost_usd).toBeGreaterThan(0);
    expect(upstream.requests.at(-1)!.headers['x-goog-api-key']).toBe('AIza-agent-own-google-key-0123');
  });

  it('when the agent exits non-zero, then exec exits with that status and the run is FAILED', async () => {
    const result = await exec(['--user', 'exec-fail', '--', process.execPath, AGENT, '7']);
    expect(result.status).toBe(7);
    const run = await settledRunOf('exec-fail');
    expect(run.status).toBe('FAILED');
    expect(run.step_count).toBe(3);
    expect(result.stderr).toMatch(new RegExp(`^runguard: run ${run.id} FAILED \\(exit 7\\) in .*: 3 calls, `));
  });

  it('when --quiet is given, then exec prints nothing of its own', async () => {
    const result = await exec(['--quiet', '--user', 'exec-quiet', '--', process.execPath, AGENT, '0']);
    expect(result).toMatchObject({ status: 0, stderr: '', stdout: `${DEFAULT_REPLY} | ${DEFAULT_REPLY}\n` });
  });

  it('when a call is denied, then the summary names the denial and its reason', async () => {
    await api.request('PUT', '/v1/users/exec-denied', { daily_budget_usd: 0.000001 });
    // The first call spends past the user's budget; the later ones are denied.
    const result = await exec(['--user', 'exec-denied', '--', process.execPath, AGENT, '0']);
    expect(result.status).not.toBe(0);
    expect(result.stderr).toMatch(
      /^runguard: run \S+ FAILED \(exit \d+\) in .*: 2 calls, .*, 1 denied \(USER_DAILY_BUDGET_EXCEEDED: user daily budget spent: \$[0-9.]+ of \$[0-9.]+; resets \S+\)\n$/m,
    );
    // And the run list says why the run failed, as it does for a run blocked at its start.
    const row = await listedRun('exec-denied');
    expect(row[2]).toBe('FAILED');
    expect(row.at(-1)).toBe('USER_DAILY_BUDGET_EXCEEDED');
  });

  it('when a call has no price, then the summary counts it as unpriced, not as $0', async () => {
    expect((await api.request('DELETE', '/v1/model-pricing/claude-test-1')).status).toBe(204);
    try {
      const result = await exec(['--user', 'exec-unpriced', '--', process.execPath, AGENT, '0']);
      expect(result.status).toBe(0);
      const run = await settledRunOf('exec-unpriced');
      expect(result.stderr).toMatch(
        new RegExp(
          `^runguard: run ${run.id} COMPLETED in .*: 3 calls, ${run.total_tokens} tokens, \\$0\\.\\d+ \\+ 1 unpriced call\n$`,
        ),
      );
      // The run list too: its cost is not the whole cost.
      expect((await listedRun('exec-unpriced'))[7]).toMatch(/^\$0\.\d+ \+1 unpriced$/);
    } finally {
      const prices = { input_cost_per_token: 0.000001, output_cost_per_token: 0.000004 };
      await api.request('PUT', '/v1/model-pricing/claude-test-1', prices);
    }
  });

  it('when a --tag is malformed, then exec says which, starts no run and never starts the command', async () => {
    const marker = join(dataDir, 'bad-tag-marker');
    for (const tag of ['Project=search', 'project']) {
      const result = await exec(['--user', 'exec-bad-tag', '--tag', tag, '--', process.execPath, AGENT, '0', marker]);
      expect(result.status).not.toBe(0);
      expect(result.stderr).toContain('--tag');
    }
    expect(existsSync(marker)).toBe(false);
    expect(await runsOf('exec-bad-tag')).toEqual([]);
  });

  it('when the user is blocked, then exec prints the reason, exits 3 and never starts the command', async () => {
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    await client.query(
      `INSERT INTO sdk_users (workspace_id, user_id, blocked) SELECT id, 'exec-blocked', true FROM workspaces`,
    );
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
    const result = await exec(
      ['--user', 'exec-signal', '--', process.execPath, AGENT, '0', marker, '--wait'],
      {},
      (child) => {
        const poll = setInterval(() => {
          if (existsSync(marker)) {
            clearInterval(poll);
            child.kill('SIGTERM');
          }
        }, 20);
      },
    );
    expect(result.status).toBe(143);
    expect((await runsOf('exec-signal')).map((r) => r.status)).toEqual(['FAILED']);
  });

  it('when exec is sent SIGTERM before the command starts, then the command never starts and the run ends FAILED', async () => {
    const relay = await startHttpRelay(url);
    try {
      let execProcess: ChildProcess | undefined;
      // The proxy token is minted, then its answer held while exec is signalled, then lost.
      relay.dropAnswer({
        method: 'POST',
        path: /\/proxy-token$/,
        beforeDrop: async () => {
          execProcess!.kill('SIGTERM');
          await new Promise((r) => setTimeout(r, 100));
        },
      });
      const marker = join(dataDir, 'early-marker');
      const result = await exec(
        ['--user', 'exec-early', '--', process.execPath, AGENT, '0', marker],
        { RUNGUARD_URL: relay.url },
        (child) => {
          execProcess = child;
        },
      );
      expect(result.status).toBe(143);
      expect(result.stderr).toContain('SIGTERM before the command started; it was not started.');
      expect(existsSync(marker)).toBe(false);
      expect((await runsOf('exec-early')).map((r) => r.status)).toEqual(['FAILED']);
    } finally {
      await relay.close();
    }
  });

  it('when exec is signalled while it ends the run, after the command exited, then it leaves at once', async () => {
    const relay = await startHttpRelay(url);
    try {
      let execProcess: ChildProcess | undefined;
      let signalled = 0;
      // The run's end is recorded, its answer held while exec is signalled, then lost (a retry would follow).
      relay.dropAnswer({
        method: 'POST',
        path: /\/end$/,
        beforeDrop: async () => {
          execProcess!.kill('SIGTERM');
          signalled = Date.now();
          await new Promise((r) => setTimeout(r, 100));
        },
      });
      const result = await exec(
        ['--user', 'exec-late', '--', process.execPath, '-e', '0'],
        { RUNGUARD_URL: relay.url },
        (child) => {
          execProcess = child;
        },
      );
      expect(signalled).toBeGreaterThan(0);
      expect(result.status).toBe(143);
      expect(relay.requestsTo('POST', /\/end$/)).toHaveLength(1); // no retry after the signal
    } finally {
      await relay.close();
    }
  });

  it('when Ctrl-C is typed in its terminal, then the command gets one SIGINT (from the terminal), not a second from exec', async () => {
    // A real terminal: `script` runs exec on a pseudo-terminal, whose line discipline turns the
    // ^C written to it into a SIGINT to the foreground process group, exec and the command alike.
    const counter = join(dataDir, 'sigint-count');
    const agent = join(dataDir, 'count-sigint.cjs');
    await writeFile(
      agent,
      `const fs = require('node:fs');
let n = 0;
process.on('SIGINT', () => { if (++n === 1) setTimeout(() => { fs.writeFileSync(${JSON.stringify(counter)}, String(n)); process.exit(0); }, 500); });
fs.writeFileSync(${JSON.stringify(counter)}, 'ready');
setInterval(() => {}, 1000);
`,
    );
    const quote = (arg: string) => `'${arg.replaceAll("'", `'\\''`)}'`;
    // `exec`: the shell script starts (dash, unlike bash) would otherwise stay in the foreground
    // group, die of the ^C itself, and make script's status 130 whatever exec did.
    const line = `exec ${[process.execPath, BIN, 'exec', '--user', 'exec-tty', '--', process.execPath, agent].map(quote).join(' ')}`;
    const terminal = spawn('script', ['-qec', line, '/dev/null'], {
      cwd: ROOT,
      env: { ...process.env, SHELL: '/bin/sh', RUNGUARD_URL: url, RUNGUARD_API_KEY: apiKey },
      stdio: ['pipe', 'ignore', 'ignore'],
    });
    const exited = new Promise<number | null>((resolve) => terminal.once('exit', resolve));
    const deadline = Date.now() + 15_000;
    while (!existsSync(counter) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    terminal.stdin.write('\x03');
    expect(await exited).toBe(0);
    expect(await readFile(counter, 'utf8')).toBe('1');
    expect((await runsOf('exec-tty')).map((r) => r.status)).toEqual(['COMPLETED']);
  });

  it("when the command runs, then it does not get the workspace's API key, only its run's proxy URLs", async () => {
    const seen = join(dataDir, 'env-seen');
    const agent = join(dataDir, 'print-env.cjs');
    await writeFile(agent, `require('node:fs').writeFileSync(${JSON.stringify(seen)}, JSON.stringify(process.env));`);
    const result = await exec(['--user', 'exec-env', '--', process.execPath, agent], {
      OPENAI_BASE_URL: 'http://127.0.0.1:11434/v1',
    });
    expect(result.status).toBe(0);
    const env = JSON.parse(await readFile(seen, 'utf8')) as Record<string, string>;
    expect(env.RUNGUARD_API_KEY).toBeUndefined();
    expect(JSON.stringify(env)).not.toContain(apiKey);
    expect(env.OPENAI_BASE_URL).toMatch(/\/proxy\/t\/[^/]+\/openai\/v1$/);
    expect(env.GOOGLE_GEMINI_BASE_URL).toMatch(/\/proxy\/t\/[^/]+\/google$/);
    // The run's trace, as the OpenTelemetry convention carries it in the environment.
    expect(env.TRACEPARENT).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(result.stderr).toContain("OPENAI_BASE_URL was set; the command's openai calls now go through runguard");
  });

  it('when --url and --api-key are given, then exec uses them, as every other command does', async () => {
    const result = await exec(
      ['--url', url, '--api-key', apiKey, '--user', 'exec-flags', '--', process.execPath, AGENT, '0'],
      {
        RUNGUARD_URL: 'http://127.0.0.1:9',
        RUNGUARD_API_KEY: '',
      },
    );
    expect(result.stderr).toMatch(/^runguard: run \S+ COMPLETED in /);
    expect(result.status).toBe(0);
    expect((await settledRunOf('exec-flags')).status).toBe('COMPLETED');
  });

  it("when no API key is given, then exec uses the daemon's key file in the data dir", async () => {
    const result = await exec(['--user', 'exec-keyfile', '--', process.execPath, AGENT, '0'], {
      RUNGUARD_API_KEY: '',
      RUNGUARD_DATA_DIR: dataDir,
    });
    expect(result.status).toBe(0);
    expect((await settledRunOf('exec-keyfile')).status).toBe('COMPLETED');
  });

  it('when the daemon has served all of the above, then its logs hold no key and no proxy token', async () => {
    // The bootstrap banner shows the key once on the terminal by design: look at the log lines only.
    const logs = daemonOutput
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .join('\n');
    expect(logs).toContain('/proxy/t/[redacted]/openai/v1/chat/completions');
    for (const secret of [apiKey, 'sk-agent-own-key', 'sk-ant-agent-own-key', 'rgp_'])
      expect(logs).not.toContain(secret);
  });
});
