/**
 * The real daemon as a child process (`node bin/runguard start`), on a fixed port so that it can be
 * killed and started again where its clients expect it, against a Postgres database and a Redis key
 * prefix of its own. Runs the built `dist/`: build first (`npx tsc -p tsconfig.json`, `npm test`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './daemon.js';
import { copyEmbeddedTemplate } from './embedded-data-dir.js';
import { caller, type Caller } from './harness.js';
import { createTestDatabase, REDIS_URL, testKeyPrefix, type TestDatabase } from './services.js';

export const PACKAGE_ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(PACKAGE_ROOT, 'bin', 'runguard');
const BUILT_CLI = join(PACKAGE_ROOT, 'dist', 'cli', 'main.js');

export interface DaemonProcess extends Caller {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  port: number;
  /** The key the daemon created on its first start, read from `<data dir>/api-key`. */
  apiKey: string;
  dataDir: string;
  databaseUrl: string;
  redisKeyPrefix: string;
  /** What the current (or last) process wrote to stdout and stderr. */
  output(): string;
  /** True while a process is running. */
  readonly running: boolean;
  /** The running process's id (null when none runs). */
  readonly pid: number | null;
  /** Stops the process (SIGKILL: no graceful shutdown, like a crash) and waits until it is gone. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /**
   * Starts a process again on the same port, data dir, database and Redis prefix; waits for
   * /health to answer 200 (or 503 as well, with `unhealthy: true`: a dependency is down).
   */
  start(options?: { unhealthy?: boolean }): Promise<void>;
  /** Stops the process and drops the database and the data dir. */
  close(): Promise<void>;
}

export interface DaemonProcessOptions {
  /** Another daemon whose Postgres database and Redis keys this one shares (a fleet of sidecars). */
  sharing?: DaemonProcess;
  /** A Postgres database the caller owns (e.g. on a private cluster): used as is, never dropped. */
  databaseUrl?: string;
  /** Redis for the counters. @default the shared test Redis */
  redisUrl?: string;
  env?: NodeJS.ProcessEnv;
  /** Starts the daemon under `ulimit -n <n>` (through a shell that then becomes the daemon). */
  openFileLimit?: number;
  /**
   * With `DATABASE_URL: ''` (the embedded database): its first start opens a copy of the migrated
   * template instead of paying PGlite's initdb and every migration, for tests of anything but that.
   */
  embeddedTemplate?: boolean;
  /**
   * How long a start may take to answer /health (a quiet machine takes a second or two; a busy one,
   * or an embedded database's first start, many). @default 45_000
   */
  startTimeoutMs?: number;
}

export async function startDaemonProcess(options: DaemonProcessOptions = {}): Promise<DaemonProcess> {
  if (!existsSync(BUILT_CLI)) {
    throw new Error(`${BUILT_CLI} is missing: build first (npx tsc -p tsconfig.json, or npm test).`);
  }
  const shared = options.sharing;
  // A daemon sharing another's database leaves dropping it to that one.
  const database: Pick<TestDatabase, 'url' | 'drop'> = shared
    ? { url: shared.databaseUrl, drop: async () => {} }
    : options.databaseUrl
      ? { url: options.databaseUrl, drop: async () => {} }
      : await createTestDatabase();
  const dataDir = await mkdtemp(join(tmpdir(), 'rg-daemon-'));
  if (options.embeddedTemplate) await copyEmbeddedTemplate(dataDir);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const redisKeyPrefix = shared?.redisKeyPrefix ?? testKeyPrefix();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: database.url,
    REDIS_URL: options.redisUrl ?? REDIS_URL,
    RUNGUARD_REDIS_KEY_PREFIX: redisKeyPrefix,
    RUNGUARD_DATA_DIR: dataDir,
    XDG_CONFIG_HOME: join(dataDir, 'user-config'),
    RUNGUARD_LOG_LEVEL: 'warn',
    ...options.env,
  };
  let child: ChildProcess | null = null;
  let output = '';

  async function answersOurKey(): Promise<boolean> {
    const key = shared?.apiKey ?? (await readFile(join(dataDir, 'api-key'), 'utf8').catch(() => '')).trim();
    if (!key) return false;
    const res = await fetch(`${url}/v1/workspace`, { headers: { authorization: `Bearer ${key}` } });
    await res.arrayBuffer();
    return res.status === 200;
  }

  async function start(startOptions: { unhealthy?: boolean } = {}): Promise<void> {
    if (child) throw new Error('The daemon is already running.');
    output = '';
    const args = [BIN, 'start', '--port', String(port), '--host', '127.0.0.1'];
    const proc =
      options.openFileLimit === undefined
        ? spawn(process.execPath, args, { cwd: PACKAGE_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
        : // `exec`: the shell's process becomes the daemon, so its pid and signals are the daemon's.
          spawn('/bin/sh', ['-c', `ulimit -n ${options.openFileLimit} && exec "$0" "$@"`, process.execPath, ...args], {
            cwd: PACKAGE_ROOT,
            env,
            stdio: ['ignore', 'pipe', 'pipe'],
          });
    child = proc;
    proc.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.once('exit', () => {
      if (child === proc) child = null;
    });
    const startTimeoutMs = options.startTimeoutMs ?? 45_000;
    const deadline = Date.now() + startTimeoutMs;
    for (;;) {
      if (child !== proc) throw new Error(`The daemon exited during start:\n${output}`);
      try {
        const status = (await fetch(`${url}/health`)).status;
        if (startOptions.unhealthy && status === 503) return;
        // The port was free when chosen, but a daemon of a test file running beside this one may
        // have taken it since (this one then fails to listen): only an answer to our key is ours.
        if (status === 200 && (await answersOurKey())) return;
      } catch {
        /* not listening yet */
      }
      if (Date.now() > deadline)
        throw new Error(`The daemon did not answer /health within ${startTimeoutMs} ms:\n${output}`);
      await sleep(25);
    }
  }

  async function kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const proc = child;
    if (!proc) return;
    const exited = new Promise<void>((done) => proc.once('exit', () => done()));
    proc.kill(signal);
    await exited;
  }

  try {
    await start();
  } catch (error) {
    await kill();
    await database.drop();
    await rm(dataDir, { recursive: true, force: true });
    throw error;
  }
  // Only the first daemon on a database creates the workspace and writes the key.
  const apiKey = shared?.apiKey ?? (await readFile(join(dataDir, 'api-key'), 'utf8')).trim();
  return {
    ...caller(url, apiKey),
    url,
    port,
    apiKey,
    dataDir,
    databaseUrl: database.url,
    redisKeyPrefix,
    output: () => output,
    get running() {
      return child !== null;
    },
    get pid() {
      return child?.pid ?? null;
    },
    kill,
    start,
    async close() {
      await kill();
      await database.drop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
