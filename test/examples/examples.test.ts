/**
 * The files in examples/, run as the README tells a user to run them, against the built daemon
 * on Postgres with a fake OpenAI upstream: the Node agent and the Python agent wrapped in
 * `runguard exec`, the TypeScript SDK agent under tsx. Each must leave a run with priced steps.
 * Also checks that the SDK example the docs show is the tested file, that it type-checks under
 * `strict` as an agent project would compile it, and that `npm pack` ships the client.
 */
import { spawn } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/main.js';
import { DEFAULT_REPLY, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { caller, type Caller } from '../support/harness.js';
import { BIN, ROOT, spawnDaemonOnPostgres, type SpawnedDaemon } from '../support/daemon.js';

let upstream: FakeUpstream;
let daemon: SpawnedDaemon & { close(): Promise<void> };
let api: Caller;

beforeAll(async () => {
  upstream = await startFakeUpstream();
  daemon = await spawnDaemonOnPostgres({ env: { RUNGUARD_OPENAI_UPSTREAM: upstream.url } });
  api = caller(daemon.url, daemon.apiKey);
});
afterAll(async () => {
  await daemon?.close();
  await upstream?.close();
});

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A command from the repository's root, with a user's environment: no RUNGUARD_API_KEY unless given. */
function run(command: string, args: string[], env: Record<string, string> = {}): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: process.env.HOME ?? '/tmp',
        // The daemon's data directory stands for `.runguard` in the checkout.
        RUNGUARD_URL: daemon.url,
        RUNGUARD_DATA_DIR: daemon.dataDir,
        OPENAI_API_KEY: 'sk-example-0123456789',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

const runguard = (...args: string[]) => run(process.execPath, [BIN, ...args]);
/** The SDK agent as its header says to run it: examples/tsconfig.json maps `@runguard/client` to the package. */
const SDK_AGENT = ['--tsconfig', 'examples/tsconfig.json', 'examples/sdk-agent.ts'];

/** The newest run of a user once its steps are all finished (a proxied result lands just after its answer). */
async function settledRunOf(userId: string): Promise<any> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const list = (await api.request('GET', `/v1/runs?user_id=${userId}`)).body;
    const run = list.items[0] ? (await api.request('GET', `/v1/runs/${list.items[0].id}`)).body : null;
    if (
      run &&
      run.status !== 'RUNNING' &&
      run.steps.every((s: any) => s.status !== 'ALLOWED') &&
      run.total_cost_usd > 0
    )
      return run;
    if (Date.now() > deadline) throw new Error(`no settled run of ${userId}: ${JSON.stringify(run)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('examples', () => {
  beforeAll(async () => {
    // The quick start's "load prices" step.
    const imported = await runguard('pricing', 'import');
    expect(imported.code).toBe(0);
  });

  it('when the Node agent with the official openai SDK runs under exec, then its two calls are a priced, COMPLETED run', async () => {
    const result = await runguard('exec', '--user', 'example-node', '--', 'node', 'examples/openai-agent.mjs');
    expect(result.code).toBe(0);
    expect(result.stdout).toBe(`${DEFAULT_REPLY}\n${DEFAULT_REPLY}\n`);
    const record = await settledRunOf('example-node');
    expect(record).toMatchObject({ status: 'COMPLETED', step_count: 2 });
    expect(record.steps.map((s: any) => [s.type, s.model, s.status])).toEqual([
      ['MODEL_CALL', 'gpt-4o-mini', 'COMPLETED'],
      ['MODEL_CALL', 'gpt-4o-mini', 'COMPLETED'],
    ]);
    expect(record.steps.every((s: any) => s.cost_usd > 0)).toBe(true);
  });

  it('when the Python agent runs under exec, then its call went through the proxy and is priced', async () => {
    const result = await runguard(
      'exec',
      '--user',
      'example-python',
      '--',
      'python3',
      'examples/python/agent.py',
      'Hi',
    );
    expect(result.stderr).not.toContain('Traceback');
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(new RegExp(`^${DEFAULT_REPLY.replace('.', '\\.')}\ntokens: \\d+ in, \\d+ out\n$`));
    const record = await settledRunOf('example-python');
    expect(record).toMatchObject({ status: 'COMPLETED', step_count: 1 });
    expect(record.steps[0]).toMatchObject({ type: 'MODEL_CALL', model: 'gpt-4o-mini', status: 'COMPLETED' });
  });

  it('when the user is blocked, then the Python agent is not started and exec exits 3', async () => {
    expect((await runguard('users', 'block', 'example-blocked')).code).toBe(0);
    const result = await runguard('exec', '--user', 'example-blocked', '--', 'python3', 'examples/python/agent.py');
    expect(result.code).toBe(3);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain('USER_BLOCKED');
  });

  it('when the SDK agent runs with the exported key, then its model call and tool call are one priced run', async () => {
    const apiKey = (await readFile(join(daemon.dataDir, 'api-key'), 'utf8')).trim();
    const result = await run(
      process.execPath,
      [join(ROOT, 'node_modules/tsx/dist/cli.mjs'), ...SDK_AGENT, 'What is runguard?'],
      {
        RUNGUARD_API_KEY: apiKey,
        OPENAI_BASE_URL: `${upstream.url}/v1`,
      },
    );
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const match = /^run ([0-9a-f-]{36}): (.*) \(1 link\)\n$/.exec(result.stdout);
    expect(match?.[2]).toBe(DEFAULT_REPLY);
    const record = (await api.request('GET', `/v1/runs/${match![1]}`)).body;
    expect(record).toMatchObject({ status: 'COMPLETED', user_id: 'user-123', metadata: { example: 'sdk-agent' } });
    expect(record.steps.map((s: any) => [s.type, s.model ?? s.tool_name, s.status])).toEqual([
      ['MODEL_CALL', 'gpt-4o-mini', 'COMPLETED'],
      ['TOOL_CALL', 'search', 'COMPLETED'],
    ]);
    expect(record.steps[0].cost_usd).toBeGreaterThan(0);
  });

  it('when the SDK agent runs without RUNGUARD_API_KEY, then the error names the variable and the key file', async () => {
    const result = await run(process.execPath, [join(ROOT, 'node_modules/tsx/dist/cli.mjs'), ...SDK_AGENT], {
      OPENAI_BASE_URL: `${upstream.url}/v1`,
    });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain('RUNGUARD_API_KEY is not set');
    expect(result.stderr).toContain('.runguard/api-key');
  });
});

/**
 * Whether `words` name a command of `program`: the first a command, the second one of its
 * subcommands, or an argument when it takes one (`kill-switch on`).
 */
function namesCommand(program: Command, [first, second]: string[]): boolean {
  const command = program.commands.find(
    (candidate) => candidate.name() === first || candidate.aliases().includes(first!),
  );
  if (!command) return false;
  if (second === undefined) return true;
  const sub = command.commands.some((candidate) => candidate.name() === second || candidate.aliases().includes(second));
  return sub || command.registeredArguments.length > 0;
}

/** The README and every page of docs/, as one text. */
async function readDocs(): Promise<string> {
  const pages = (await readdir(join(ROOT, 'docs'))).filter((name) => name.endsWith('.md'));
  const texts = await Promise.all(
    ['README.md', ...pages.map((name) => join('docs', name))].map((path) => readFile(join(ROOT, path), 'utf8')),
  );
  return texts.join('\n');
}

describe('the README, the docs and the package', () => {
  it("when the docs show the SDK example, then it is examples/sdk-agent.ts's code, line for line", async () => {
    const [docs, example] = await Promise.all([readDocs(), readFile(join(ROOT, 'examples/sdk-agent.ts'), 'utf8')]);
    const blocks = [...docs.matchAll(/```ts\n([\s\S]*?)```/g)]
      .map((m) => m[1]!)
      .filter((b) => b.includes("'@runguard/client'"));
    expect(blocks.length).toBeGreaterThan(0);
    for (const block of blocks) expect(example).toContain(block.trim());
  });

  it('when an agent project compiles the SDK example under strict with the DOM library, then it type-checks', async () => {
    const result = await run(process.execPath, [
      join(ROOT, 'node_modules/typescript/bin/tsc'),
      '-p',
      'examples/tsconfig.json',
    ]);
    expect(result.stdout + result.stderr).toBe('');
    expect(result.code).toBe(0);
  });

  it('when every `npx runguard` line of the README and the docs is read, then each names a command that exists', async () => {
    const readme = await readFile(join(ROOT, 'README.md'), 'utf8');
    const commands = new Set<string>();
    for (const [, rest] of (await readDocs()).matchAll(/npx runguard ([a-z][a-z-]*(?: [a-z][a-z-]*)?)/g))
      commands.add(rest!);
    expect(commands.size).toBeGreaterThan(5);
    // Looked up in the CLI's own declaration, in this process: a CLI process per command cost a minute.
    const program = buildProgram();
    const unknown = [...commands].filter((command) => !namesCommand(program, command.split(' ')));
    expect(unknown).toEqual([]);
    expect(readme).not.toMatch(/^runguard /m);
  });

  it("when the daemon's package is packed, then the client and its types are in it (runguard/client)", async () => {
    const result = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts']);
    expect(result.code).toBe(0);
    const files = (JSON.parse(result.stdout) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path);
    expect(files).toEqual(
      expect.arrayContaining([
        'clients/typescript/dist/index.js',
        'clients/typescript/dist/index.d.ts',
        'bin/runguard',
        'package.json',
      ]),
    );
  });
});
