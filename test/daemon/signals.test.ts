/**
 * Stopping the daemon as supervisors do: SIGTERM to the process `npm start` leaves (npm, whose
 * `sh -c` would not pass it on), to the whole process group (npm, the shell and node at once), and
 * to the bin started directly. Each time the daemon finishes gracefully ("stopped" in its log),
 * nothing of the group is left, and the port is free.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, freePort, ROOT } from '../support/daemon.js';
import { createTestDatabase, type TestDatabase } from '../support/services.js';

let database: TestDatabase;
const dirs: string[] = [];
/** Every group started: what a failed test leaves running is killed at the end. */
const groups: number[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
});

afterAll(async () => {
  for (const pgid of groups) if (groupAlive(pgid)) process.kill(-pgid, 'SIGKILL');
  await database?.drop();
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

/** Whether any process of the group is alive. */
function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function waitFor(condition: () => boolean | Promise<boolean>, what: string, output: () => string) {
  const deadline = Date.now() + 60_000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen:\n${output()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Starts `command` in a process group of its own (as a supervisor does), waits for /health. */
async function startGroup(command: string, args: string[]) {
  const port = await freePort();
  const dataDir = await mkdtemp(join(tmpdir(), 'rg-signals-'));
  dirs.push(dataDir);
  const child = spawn(command, args, {
    cwd: ROOT,
    detached: true,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? tmpdir(),
      PORT: String(port),
      DATABASE_URL: database.url,
      RUNGUARD_DATA_DIR: dataDir,
      RUNGUARD_LOG_FORMAT: 'json',
      XDG_CONFIG_HOME: join(dataDir, 'user-config'),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  groups.push(child.pid!);
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const healthy = async () => {
    try {
      return (await fetch(`http://127.0.0.1:${port}/health`)).status === 200;
    } catch {
      return false;
    }
  };
  await waitFor(healthy, 'the daemon answering /health', () => output);
  return { pid: child.pid!, port, exited, output: () => output };
}

async function expectGracefulStop(started: Awaited<ReturnType<typeof startGroup>>) {
  await waitFor(() => !groupAlive(started.pid), 'every process of the group ending', started.output);
  expect(await started.exited).toBe(0);
  const messages = started
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => (JSON.parse(line) as { msg: string }).msg);
  expect(messages).toContain('stopped');
  expect(messages).not.toContain('second signal during shutdown; exiting now');
  expect(await portOpen(started.port)).toBe(false);
}

describe('stopping the daemon with a signal', { timeout: 120_000 }, () => {
  it('when SIGTERM is sent to the process `npm start` leaves, then the daemon stops gracefully', async () => {
    const started = await startGroup('npm', ['start']);
    process.kill(started.pid, 'SIGTERM');
    await expectGracefulStop(started);
  });

  it('when SIGTERM is sent to the process group of `npm start`, then the daemon stops gracefully, once', async () => {
    const started = await startGroup('npm', ['start']);
    process.kill(-started.pid, 'SIGTERM');
    await expectGracefulStop(started);
  });

  it('when SIGTERM is sent to the bin started directly, or to its group, then it stops gracefully', async () => {
    const direct = await startGroup(BIN, ['start']);
    process.kill(direct.pid, 'SIGTERM');
    await expectGracefulStop(direct);
    const grouped = await startGroup(BIN, ['start']);
    process.kill(-grouped.pid, 'SIGTERM');
    await expectGracefulStop(grouped);
  });
});
