/**
 * Servers a test owns, so it can stop, kill and restart them without touching the shared Postgres
 * (127.0.0.1:5432) and Redis (127.0.0.1:6379) that other test files use in parallel: a Redis and a
 * Postgres cluster on free ports in temporary folders, and a TCP relay that can cut the network
 * between a client and a server while the server keeps its data.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import pgDriver from 'pg';
import { freePort } from './daemon.js';

const run = promisify(execFile);

/**
 * The server binaries, wherever this machine keeps them: `REDIS_SERVER` or `redis-server` on the
 * PATH; Postgres's `initdb` and `pg_ctl` in `TEST_PG_BINDIR`, else `pg_config --bindir` (Debian
 * keeps them off the PATH, in /usr/lib/postgresql/<version>/bin), else the PATH.
 */
const redisServer = () => process.env.REDIS_SERVER ?? 'redis-server';
let pgBinDir: Promise<string | null> | null = null;
async function pgBinary(name: 'initdb' | 'pg_ctl'): Promise<string> {
  pgBinDir ??= process.env.TEST_PG_BINDIR
    ? Promise.resolve(process.env.TEST_PG_BINDIR)
    : run('pg_config', ['--bindir']).then(
        ({ stdout }) => stdout.trim() || null,
        () => null,
      );
  const dir = await pgBinDir;
  return dir ? join(dir, name) : name;
}

/** Waits until something accepts TCP connections on the port. */
async function waitForPort(
  port: number,
  timeoutMs: number,
  what: string,
  alive: () => boolean = () => true,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (up) return;
    if (!alive()) throw new Error(`${what} exited before it listened on ${port}`);
    if (Date.now() > deadline) throw new Error(`${what} did not listen on ${port} within ${timeoutMs} ms`);
    await sleep(25);
  }
}

export interface PrivateRedis {
  /** `redis://127.0.0.1:<port>`. */
  url: string;
  port: number;
  readonly running: boolean;
  /** Kills the server (SIGKILL by default): its data is gone, as after a crash without persistence. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /** Starts a new, empty server on the same port. */
  start(): Promise<void>;
  close(): Promise<void>;
}

/** A `redis-server` without persistence on a free port. */
export async function startPrivateRedis(): Promise<PrivateRedis> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'rg-redis-'));
  let child: ChildProcess | null = null;

  async function start(): Promise<void> {
    if (child) throw new Error('Redis is already running.');
    const proc = spawn(
      redisServer(),
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
      { stdio: 'ignore' },
    );
    child = proc;
    const gone = () => {
      if (child === proc) child = null;
    };
    proc.once('exit', gone);
    proc.once('error', gone); // not found: the wait below says it exited
    await waitForPort(port, 10_000, 'redis-server', () => child === proc);
  }

  async function stop(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const proc = child;
    if (!proc) return;
    const exited = new Promise<void>((done) => proc.once('exit', () => done()));
    proc.kill(signal);
    await exited;
  }

  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    get running() {
      return child !== null;
    },
    stop,
    start,
    async close() {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export interface PrivatePostgres {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (trust auth). */
  url: string;
  port: number;
  /** Stops the cluster: `immediate` is a crash (no checkpoint), `fast` a clean shutdown. */
  stop(mode?: 'immediate' | 'fast'): Promise<void>;
  /** Starts the cluster again on the same port and data. */
  start(): Promise<void>;
  /** One statement's rows, on a connection of its own: nothing is kept open across a stop. */
  query(sql: string, params?: unknown[]): Promise<any[]>;
  close(): Promise<void>;
}

/**
 * A Postgres cluster of its own (`initdb` + `pg_ctl`, about 1.5 s). Postgres refuses to run as
 * root: then the cluster belongs to the `postgres` system user and is driven through `runuser`.
 */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'rg-pg-'));
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    await chown(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  const pg = async (name: 'initdb' | 'pg_ctl', args: string[]) => {
    const command = await pgBinary(name);
    return asRoot ? run('runuser', ['-u', 'postgres', '--', command, ...args]) : run(command, args);
  };
  const data = join(dir, 'data');
  await pg('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync']);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`;
  const start = async () => {
    await pg('pg_ctl', ['-D', data, '-o', options, '-l', join(dir, 'log'), '-w', '-t', '30', 'start']);
  };
  const stop = async (mode: 'immediate' | 'fast' = 'immediate') => {
    await pg('pg_ctl', ['-D', data, '-m', mode, '-w', '-t', '30', 'stop']);
  };
  await start();
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  return {
    url,
    port,
    stop,
    start,
    async query(sql, params = []) {
      const client = new pgDriver.Client({ connectionString: url });
      await client.connect();
      try {
        return (await client.query(sql, params)).rows;
      } finally {
        await client.end();
      }
    },
    async close() {
      await stop().catch(() => {});
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export interface TcpRelay {
  /** The relay's port on 127.0.0.1: connect here instead of to the target. */
  port: number;
  /**
   * Cuts the network: open connections are destroyed and new ones refused, while the server
   * behind keeps running with its data.
   */
  cut(): Promise<void>;
  /** Accepts and relays connections again, on the same port. */
  restore(): Promise<void>;
  /**
   * A server that stops answering without a refusal (a partition, a hung host): open connections
   * stay open and new ones are accepted, but no byte passes either way.
   */
  silence(): void;
  close(): Promise<void>;
}

/** A TCP relay to `127.0.0.1:<targetPort>` whose link can be cut and restored. */
export async function startTcpRelay(targetPort: number): Promise<TcpRelay> {
  const port = await freePort();
  const sockets = new Set<Socket>();
  let server: Server | null = null;
  let silent = false;

  async function listen(): Promise<void> {
    silent = false;
    const s = createServer((client) => {
      sockets.add(client);
      client.once('close', () => sockets.delete(client));
      client.on('error', () => {});
      if (silent) return; // taken, never answered
      const upstream = connect(targetPort, '127.0.0.1');
      sockets.add(upstream);
      upstream.once('close', () => sockets.delete(upstream));
      upstream.on('error', () => {});
      client.pipe(upstream).pipe(client);
      client.once('close', () => upstream.destroy());
      upstream.once('close', () => client.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => resolve());
    });
    server = s;
  }

  async function cut(): Promise<void> {
    const s = server;
    server = null;
    for (const socket of sockets) socket.destroy();
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  await listen();
  return {
    port,
    cut,
    restore: listen,
    silence() {
      silent = true;
      for (const socket of sockets) socket.unpipe();
    },
    close: cut,
  };
}
