/**
 * The processes a bench run starts: helpers written in TypeScript (run through tsx) that print
 * `READY <url>` when listening, and the real daemon (`node bin/runguard start`).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { freePort } from '../../test/support/daemon.js';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface Child {
  pid: number;
  url: string;
  stop(): Promise<void>;
}

function stopper(proc: ChildProcess, graceMs = 10_000): () => Promise<void> {
  return async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };
}

/**
 * Starts `bench/<script>` under tsx (with `nodeFlags` before it); resolves with the URL it
 * announces on stdout.
 */
export async function startHelper(
  script: string,
  args: string[] = [],
  env: NodeJS.ProcessEnv = {},
  nodeFlags: string[] = [],
): Promise<Child> {
  const proc = spawn(process.execPath, [...nodeFlags, '--import', 'tsx', join(ROOT, 'bench', script), ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let buffered = '';
    proc.stdout.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const match = /READY (\S+)/.exec(buffered);
      if (match) resolve(match[1]!);
    });
    proc.once('exit', (code) => reject(new Error(`${script} exited with ${code} before it was ready`)));
  });
  return { pid: proc.pid!, url, stop: stopper(proc) };
}

export { freePort };

/**
 * Compiles `src/` into `dist/`, which the daemon runs from, and bundles TypeBox as `npm run build`
 * does: tsc alone writes back the module that loads the package's ~700 files, a daemon ~2.5 MB of
 * heap larger than the one users run.
 */
export function buildDaemon(): void {
  const built = spawnSync(join(ROOT, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json'], {
    cwd: ROOT,
    stdio: 'inherit',
  });
  if (built.status !== 0) throw new Error('tsc failed');
  const bundled = spawnSync(process.execPath, [join(ROOT, 'scripts', 'bundle-typebox.mjs')], {
    cwd: ROOT,
    stdio: 'inherit',
  });
  if (bundled.status !== 0) throw new Error('bundling TypeBox failed');
}

export interface DaemonOptions {
  databaseUrl: string;
  redisUrl: string;
  redisKeyPrefix: string;
  dataDir: string;
  openaiUpstream: string;
  /** Directory for a V8 CPU profile written when the daemon exits. */
  cpuProfDir?: string;
  /** Another build of runguard to run (a before/after comparison); default: this one. */
  root?: string;
  /** V8 flags instead of the ones the daemon is launched with everywhere (tuning experiments). */
  nodeFlags?: string[];
  /** Opens the inspector on this loopback port (allocation sampling). */
  inspectPort?: number;
  /** `RUNGUARD_LOG_LEVEL`. @default 'warn' (a user's daemon logs at `info`: one line per proxied call) */
  logLevel?: string;
  /** More providers (`RUNGUARD_PROVIDERS`), by name: e.g. one per upstream delay. */
  providers?: Record<string, { type: 'openai' | 'anthropic'; upstream: string }>;
  /** More environment (`OTEL_*` for the OpenTelemetry arms). */
  env?: Record<string, string>;
}

export interface DaemonProcess extends Child {
  apiKey: string;
}

/** The V8 flags the daemon is launched with everywhere (see bin/runguard), so the bench measures that. */
export const DAEMON_NODE_FLAGS = [
  '--heap-growing-percent=50',
  '--incremental-marking-soft-trigger=70',
  '--incremental-marking-hard-trigger=90',
  '--v8-pool-size=1',
];

export async function startDaemon(options: DaemonOptions): Promise<DaemonProcess> {
  const port = await freePort();
  const nodeFlags = [
    ...(options.nodeFlags ?? DAEMON_NODE_FLAGS),
    ...(options.cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${options.cpuProfDir}`] : []),
    ...(options.inspectPort ? [`--inspect=127.0.0.1:${options.inspectPort}`] : []),
  ];
  const root = options.root ?? ROOT;
  const proc = spawn(process.execPath, [...nodeFlags, join(root, 'bin', 'runguard'), 'start'], {
    cwd: root,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      HOST: '127.0.0.1',
      PORT: String(port),
      DATABASE_URL: options.databaseUrl,
      REDIS_URL: options.redisUrl,
      RUNGUARD_REDIS_KEY_PREFIX: options.redisKeyPrefix,
      RUNGUARD_DATA_DIR: options.dataDir,
      XDG_CONFIG_HOME: options.dataDir,
      RUNGUARD_LOG_LEVEL: options.logLevel ?? 'warn',
      RUNGUARD_OPENAI_UPSTREAM: options.openaiUpstream,
      ...(options.providers ? { RUNGUARD_PROVIDERS: JSON.stringify(options.providers) } : {}),
      // Unlimited runs: the bench measures speed, not plan ceilings.
      RUNGUARD_DEFAULT_PLAN: 'enterprise',
      ...(process.env.MALLOC_ARENA_MAX ? { MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX } : {}),
      ...options.env,
    },
    // The daemon prints its first API key on stdout: read it from the key file instead.
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  let exited: number | null = null;
  proc.once('exit', (code) => (exited = code ?? -1));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited !== null) throw new Error(`the daemon exited with ${exited} during start`);
    try {
      const res = await fetch(`${url}/health`);
      if (res.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stopper(proc)();
      throw new Error('the daemon did not answer /health within 60 s');
    }
    await sleep(100);
  }
  const apiKey = (await readFile(join(options.dataDir, 'api-key'), 'utf8')).trim();
  return { pid: proc.pid!, url, apiKey, stop: stopper(proc, 30_000) };
}

/** Resident set size of a process, in MB (VmRSS of /proc/<pid>/status). */
export async function rssMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)\s+kB/.exec(status)?.[1] ?? NaN);
  return kb / 1024;
}

/** CPU time a process's threads have run so far, in µs (schedstat's first field, ns). */
export async function cpuUs(pid: number): Promise<number> {
  let ns = 0;
  for (const task of await readdir(`/proc/${pid}/task`)) {
    const stat = await readFile(`/proc/${pid}/task/${task}/schedstat`, 'utf8').catch(() => '0');
    ns += Number(stat.split(' ')[0]);
  }
  return ns / 1000;
}

/** Where a daemon's resident memory is, in MB: what an RSS reading alone cannot tell. */
export interface MemoryBreakdown {
  /** Anonymous pages (the V8 heap, malloc, stacks) and file pages (mostly the `node` binary's own). */
  anonMb: number;
  fileMb: number;
  /** The V8 heap's committed size by space (new, old, code, large objects...), from the daemon's /metrics. */
  heapSpacesMb: Record<string, number>;
  heapUsedMb: number;
  /** Memory V8 is told of but does not hold (Buffers): from /metrics. */
  externalMb: number;
}

export async function memoryBreakdown(daemon: DaemonProcess): Promise<MemoryBreakdown> {
  const status = await readFile(`/proc/${daemon.pid}/status`, 'utf8');
  const mb = (kb: RegExpExecArray | null) => Math.round(Number(kb?.[1] ?? NaN) / 102.4) / 10;
  const res = await fetch(`${daemon.url}/metrics`, { headers: { authorization: `Bearer ${daemon.apiKey}` } });
  const text = await res.text();
  const bytes = (re: RegExp) => Math.round(Number(re.exec(text)?.[1] ?? NaN) / 104_857.6) / 10;
  const heapSpacesMb: Record<string, number> = {};
  for (const m of text.matchAll(/^nodejs_heap_space_size_total_bytes\{space="(\w+)"\} (\S+)$/gm)) {
    if (Number(m[2]) > 0) heapSpacesMb[m[1]!] = Math.round(Number(m[2]) / 104_857.6) / 10;
  }
  return {
    anonMb: mb(/RssAnon:\s+(\d+)/.exec(status)),
    fileMb: mb(/RssFile:\s+(\d+)/.exec(status)),
    heapSpacesMb,
    heapUsedMb: bytes(/^nodejs_heap_size_used_bytes (\S+)$/m),
    externalMb: bytes(/^nodejs_external_memory_bytes (\S+)$/m),
  };
}

/** One line of a breakdown, for logs and the README. */
export function formatBreakdown(b: MemoryBreakdown): string {
  const spaces = Object.entries(b.heapSpacesMb)
    .map(([space, mb]) => `${space} ${mb}`)
    .join(', ');
  return `anonymous ${b.anonMb} MB, file ${b.fileMb} MB; V8 heap committed by space: ${spaces} MB (${b.heapUsedMb} MB used); external ${b.externalMb} MB`;
}

/**
 * RSS of a process left idle for `seconds`, sampled every 5 s. An idle daemon's RSS stays where
 * the last work left it until V8's memory reducer runs (it waits for allocation to stop, then
 * collects in rounds: seen here after 20 to 30 s), so a reading taken at once measures the garbage
 * of what just ran. A fixed wait, not a "stable for a while" rule: the RSS is flat for those 20 to
 * 30 s before it drops.
 */
export async function idleRssMb(pid: number, seconds = 60): Promise<{ mb: number; samples: number[] }> {
  const samples: number[] = [];
  for (let s = 0; s <= seconds; s += 5) {
    if (s > 0) await sleep(5_000);
    samples.push(Math.round(await rssMb(pid)));
  }
  return { mb: samples.at(-1)!, samples };
}

/** Samples a process's RSS until stopped; the peak and the samples. */
export function rssSampler(pid: number, everyMs = 250) {
  const samples: number[] = [];
  const timer = setInterval(() => {
    rssMb(pid).then(
      (mb) => samples.push(mb),
      () => {},
    );
  }, everyMs);
  return {
    samples,
    stop(): { peak: number; samples: number[] } {
      clearInterval(timer);
      return { peak: samples.length ? Math.max(...samples) : NaN, samples };
    },
  };
}

/**
 * Portkey's open-source gateway (`@portkey-ai/gateway`, a dev dependency), started as its users
 * start it: its own bin with `--headless` (no log UI) and a port. It routes each request by its
 * headers (`x-portkey-provider`, `x-portkey-custom-host`), so one gateway serves every upstream.
 * It listens on every interface (its bin takes no host); the bench only sends to 127.0.0.1.
 */
export async function startPortkey(): Promise<Child> {
  const packageDir = join(ROOT, 'node_modules', '@portkey-ai', 'gateway');
  const manifest = JSON.parse(await readFile(join(packageDir, 'package.json'), 'utf8')) as { bin: string };
  const port = await freePort();
  const proc = spawn(process.execPath, [join(packageDir, manifest.bin), '--headless', `--port=${port}`], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME },
    // It prints a spinner and a line per failure; nothing the bench reads.
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  let exited: number | null = null;
  proc.once('exit', (code) => (exited = code ?? -1));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited !== null) throw new Error(`Portkey's gateway exited with ${exited} during start`);
    try {
      if ((await fetch(url)).status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stopper(proc)();
      throw new Error("Portkey's gateway did not answer within 30 s");
    }
    await sleep(100);
  }
  return { pid: proc.pid!, url, stop: stopper(proc) };
}
