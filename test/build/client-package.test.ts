/**
 * @runguard/client as an agent project gets it: `npm pack` in clients/typescript (which builds it),
 * the tarball installed offline into an empty project, imported by Node and type-checked by tsc
 * there, and used against the real daemon. Nothing of the server comes along.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { caller, type Caller } from '../support/harness.js';
import { ROOT, spawnDaemonOnPostgres, type SpawnedDaemon } from '../support/daemon.js';

const run = promisify(execFile);
const PACKAGE_DIR = join(ROOT, 'clients/typescript');
/** The packed client is ~30 kB (~100 kB unpacked); the daemon's install was 86 MB. */
const MAX_INSTALLED_BYTES = 300_000;

let tmp: string;
let project: string;
let daemon: SpawnedDaemon & { close(): Promise<void> };
let api: Caller;

beforeAll(async () => {
  tmp = await mkdtemp(join(tmpdir(), 'rg-client-package-'));
  const packed = await run('npm', ['pack', '--json', '--pack-destination', tmp], { cwd: PACKAGE_DIR });
  const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }];
  project = join(tmp, 'agent');
  await mkdir(project);
  await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'agent', private: true, type: 'module' }));
  // An empty cache and --offline: an install that needed anything beyond the tarball would fail.
  await run('npm', ['install', '--offline', '--no-audit', '--no-fund', join(tmp, filename)], {
    cwd: project,
    env: { ...process.env, npm_config_cache: join(tmp, 'npm-cache') },
  });
  daemon = await spawnDaemonOnPostgres();
  api = caller(daemon.url, daemon.apiKey);
}, 180_000);

afterAll(async () => {
  await daemon?.close();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

/** Every file under `dir`, with its size. */
async function filesUnder(dir: string): Promise<{ path: string; bytes: number }[]> {
  const names = await readdir(dir, { recursive: true, withFileTypes: true });
  return Promise.all(
    names
      .filter((entry) => entry.isFile())
      .map(async (entry) => {
        const path = join(entry.parentPath, entry.name);
        return { path: path.slice(dir.length + 1), bytes: (await stat(path)).size };
      }),
  );
}

describe('the client package installed into an empty project', () => {
  it('when installed, then node_modules holds the client alone: small, built, with nothing to run', async () => {
    const lock = JSON.parse(await readFile(join(project, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, unknown>;
    };
    expect(Object.keys(lock.packages)).toEqual(['', 'node_modules/@runguard/client']);
    expect((await readdir(join(project, 'node_modules'))).filter((name) => !name.startsWith('.'))).toEqual([
      '@runguard',
    ]);
    const installed = join(project, 'node_modules/@runguard/client');
    const files = await filesUnder(installed);
    expect(files.map((file) => file.path)).toEqual(
      expect.arrayContaining([
        'package.json',
        'README.md',
        'dist/index.js',
        'dist/index.d.ts',
        'dist/shared/wire.d.ts',
      ]),
    );
    // Only the build: no sources, maps or tests.
    expect(files.filter((file) => !/^(package\.json|README\.md|dist\/.*\.(js|d\.ts))$/.test(file.path))).toEqual([]);
    expect(files.reduce((sum, file) => sum + file.bytes, 0)).toBeLessThan(MAX_INSTALLED_BYTES);
    const manifest = JSON.parse(await readFile(join(installed, 'package.json'), 'utf8')) as Record<string, any>;
    expect(manifest.dependencies ?? {}).toEqual({});
    expect(manifest.peerDependencies ?? {}).toEqual({});
    expect(Object.keys(manifest.scripts ?? {}).filter((name) => /install|prepare/.test(name))).toEqual([]);
  });

  it('when an agent imports it and runs against the daemon, then its run, steps, tokens and denials are recorded', async () => {
    await writeFile(
      join(project, 'agent.mjs'),
      `import { extractors, GuardBlockedError, GuardClient } from '@runguard/client';
const guard = new GuardClient(); // RUNGUARD_API_KEY, RUNGUARD_URL
const runId = await guard.run('package-user', async (run) => {
  await run.modelCall(async () => ({ usage: { prompt_tokens: 12, completion_tokens: 5 } }), {
    model: 'gpt-4o-mini',
    tokenExtractor: extractors.openai,
  });
  await run.toolCall(() => 'found', { toolName: 'search' });
  return run.id;
});
let blocked = 'not blocked';
try {
  await guard.run('package-blocked', async () => 'ran');
} catch (error) {
  if (!(error instanceof GuardBlockedError)) throw error;
  blocked = error.reason;
}
await guard.close();
console.log(JSON.stringify({ runId, blocked }));
`,
    );
    expect((await api.request('PUT', '/v1/users/package-blocked', { blocked: true })).status).toBe(200);
    const { stdout } = await run(process.execPath, ['agent.mjs'], {
      cwd: project,
      env: { PATH: process.env.PATH ?? '', RUNGUARD_API_KEY: daemon.apiKey!, RUNGUARD_URL: daemon.url },
    });
    const { runId, blocked } = JSON.parse(stdout) as { runId: string; blocked: string };
    expect(blocked).toBe('Run start for user "package-blocked" was blocked: the user is blocked (USER_BLOCKED).');
    const record = (await api.request('GET', `/v1/runs/${runId}`)).body;
    expect(record).toMatchObject({ status: 'COMPLETED', user_id: 'package-user' });
    expect(
      record.steps.map((step: any) => [step.type, step.model ?? step.tool_name, step.status, step.prompt_tokens]),
    ).toEqual([
      ['MODEL_CALL', 'gpt-4o-mini', 'COMPLETED', 12],
      ['TOOL_CALL', 'search', 'COMPLETED', null],
    ]);
  });

  it('when an agent project type-checks against it, then its declarations need nothing else', async () => {
    await writeFile(
      join(project, 'agent.ts'),
      `import { GuardClient, type DenyReason, type Run, type RunHandle, type TokenUsage } from '@runguard/client';
const reason: DenyReason = 'USER_BLOCKED';
export const stored: Run['steps'][number]['decision']['reason'] = reason;
export const usage: TokenUsage = { promptTokens: 1, completionTokens: 2 };
export const idOf = (guard: GuardClient): Promise<string> => guard.run('u', async (run: RunHandle) => run.id);
`,
    );
    await writeFile(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          lib: ['ES2022', 'DOM'],
          types: [],
          strict: true,
          // The package's own declarations are checked too: they must not name the server's types.
          skipLibCheck: false,
          noEmit: true,
        },
        include: ['agent.ts'],
      }),
    );
    const checked = await run(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', project]).catch(
      (error: { stdout: string }) => ({ stdout: error.stdout }),
    );
    expect(checked.stdout).toBe('');
  });
});
