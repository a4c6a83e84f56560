/**
 * Spawns the real daemon (`bin/runguard start`, which loads dist/: build first with
 * `npx tsc -p tsconfig.json`) on a free port, waits for `/health`, captures its output, and
 * stops it. Also runs CLI commands the way a user does.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTestDatabase, type TestDatabase } from './services.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const BIN = join(ROOT, 'bin', 'runguard');

function assertBuilt() {
  if (!existsSync(join(ROOT, 'dist', 'cli', 'main.js'))) {
    throw new Error('bin/runguard loads dist/: build first with `npx tsc -p tsconfig.json`.');
  }
}

/** A port nothing listens on right now. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface SpawnedDaemon {
  url: string;
  port: number;
  dataDir: string;
  /** The bootstrap key from `<dataDir>/api-key` (null when the database already had a workspace). */
  apiKey: string | null;
  process: ChildProcess;
  /** Everything written so far. */
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code (or signal name) once the process ended. */
  exited: Promise<number | string>;
  /** Sends a signal (SIGTERM by default) and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

export interface DaemonOptions {
  /** Postgres for the records; omitted: the embedded database in the data dir. */
  databaseUrl?: string;
  /** A data dir to reuse (e.g. a second daemon sharing the key file); omitted: a fresh temp dir. */
  dataDir?: string;
  env?: Record<string, string>;
  args?: string[];
  /** How long to wait for `/health` (a quiet machine takes a second or two; a busy one, many). @default 45000 */
  startTimeoutMs?: number;
}

/** The URL in the daemon's `runguard listening` line (JSON logs, at info or below). */
const LISTENING = /"url":"(http:\/\/[^"]+)"[^\n]*"msg":"runguard listening"/;

export async function spawnDaemon(options: DaemonOptions = {}): Promise<SpawnedDaemon> {
  assertBuilt();
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), 'rg-daemon-')));
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? tmpdir(),
    RUNGUARD_DATA_DIR: dataDir,
    RUNGUARD_LOG_FORMAT: 'json',
    // The user-level record of the last daemon started goes here, not into the real home.
    XDG_CONFIG_HOME: join(dataDir, 'user-config'),
    ...(options.databaseUrl ? { DATABASE_URL: options.databaseUrl } : {}),
    ...options.env,
  };
  const child = spawn(
    process.execPath,
    // Port 0: the daemon binds one itself and names it. A port picked here and bound later could be
    // taken meanwhile by another test's server or daemon, whose /health would then answer for it.
    [BIN, 'start', '--port', '0', '--host', '127.0.0.1', ...(options.args ?? [])],
    {
      cwd: dataDir,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const exited = new Promise<number | string>((resolve) =>
    child.once('exit', (code, signal) => resolve(code ?? signal ?? -1)),
  );
  const deadline = Date.now() + (options.startTimeoutMs ?? 45_000);
  let ended: number | string | null = null;
  void exited.then((code) => (ended = code));
  let url: string | undefined;
  for (;;) {
    if (ended !== null) throw new Error(`the daemon exited (${ended}) before it was healthy:\n${out}\n${err}`);
    url ??= (LISTENING.exec(out) ?? LISTENING.exec(err))?.[1];
    try {
      if (url && (await fetch(`${url}/health`)).status === 200) break;
    } catch {
      /* not answering yet */
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      const why = url ? 'not healthy' : 'no `runguard listening` line (a log level above info?)';
      throw new Error(`the daemon was ${why} in time:\n${out}\n${err}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const apiKey = await readFile(join(dataDir, 'api-key'), 'utf8').then(
    (k) => k.trim(),
    () => null,
  );
  return {
    url,
    port: Number(new URL(url).port),
    dataDir,
    apiKey,
    process: child,
    exited,
    stdout: () => out,
    stderr: () => err,
    async stop(signal = 'SIGTERM') {
      if (ended === null) child.kill(signal);
      return exited;
    },
  };
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `runguard <args>` to completion. */
export async function runCli(
  args: string[],
  env: Record<string, string> = {},
  options: { cwd?: string } = {},
): Promise<CliResult> {
  assertBuilt();
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: options.cwd ?? tmpdir(),
    // No user-level record unless the test gives one: the real home's must not decide a test.
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? tmpdir(),
      XDG_CONFIG_HOME: join(tmpdir(), 'rg-no-user-config'),
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  return { code, stdout, stderr };
}

/** A daemon on a fresh Postgres database of its own, with everything cleaned up by `close`. */
export async function spawnDaemonOnPostgres(
  options: Omit<DaemonOptions, 'databaseUrl'> = {},
): Promise<SpawnedDaemon & { database: TestDatabase; close(): Promise<void> }> {
  const database = await createTestDatabase();
  try {
    const daemon = await spawnDaemon({ ...options, databaseUrl: database.url });
    return {
      ...daemon,
      database,
      async close() {
        await daemon.stop('SIGTERM');
        await database.drop();
        if (!options.dataDir) await rm(daemon.dataDir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    await database.drop();
    throw error;
  }
}
