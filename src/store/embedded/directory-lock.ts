/**
 * One process at a time on an embedded database's files: PGlite has no lock of its own, and a
 * second process opening the same directory (a second `runguard start`, `reconcile` or `migrate`
 * beside a running daemon) aborted, and could write beside the first.
 *
 * The lock is a file created exclusively, naming its owner: pid, kernel (Linux boot id), PID
 * namespace, host name, and a token of this taking. Its holder refreshes the file's mtime every
 * `updateMs` (a heartbeat) from a thread of its own, so a main thread busy in PGlite's synchronous
 * WASM (a long query, a migration) does not stop it; a lock not refreshed for `staleMs` is stale
 * whoever it names: its holder is dead or frozen. A pid is
 * trusted only where it means something: when the lock was written in this very PID namespace of
 * this kernel, a dead owner (a crash, SIGKILL), or one naming this process's own pid while this
 * process does not hold it, is stale at once. An owner in another namespace (another container on
 * the same volume, both perhaps pid 1) or on another kernel is judged by its heartbeat alone: a
 * taker waits, and is refused as soon as it sees the heartbeat move, or takes the lock over once
 * it has not moved for `staleMs` (a container restarted after a crash starts by itself). A second
 * exclusive file guards the takeover, so that of many contenders exactly one takes it.
 *
 * The holder checks at each heartbeat that the file is still the one it created; if not (taken
 * over while this process was frozen for longer than `staleMs`, or removed by hand), the lock is
 * compromised: `onCompromised` is called, which by default throws, ending the process rather than
 * letting it go on writing files another process may have opened. `release` removes the file only
 * while it is still this process's own.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, readlinkSync } from 'node:fs';
import { open, readFile, rm, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { hostname } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { HeartbeatData, HeartbeatMessage } from './lock-heartbeat.js';

export class DirectoryInUseError extends Error {
  override name = 'DirectoryInUseError';
}

/** Lock files this process holds: its own pid in one of them otherwise means an earlier process. */
const held = new Set<string>();

const HOST = hostname().replace(/\s+/g, '_') || '-';

/**
 * The kernel this process runs on: Linux's id of this boot (shared by all containers on a host,
 * new at each reboot). Elsewhere (no PID namespaces there) the host stands for it.
 */
const KERNEL = (() => {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || '-';
  } catch {
    return process.platform === 'linux' ? '-' : `host:${HOST}`;
  }
})();

/**
 * This process's PID namespace, as `pid:[inode]`: two processes of one kernel share a namespace
 * exactly when these are equal (an inode number is reused only once its namespace is gone, and so
 * every process of it). Unknown on Linux: a value no other process has, so no pid is trusted.
 */
const PID_SPACE = (() => {
  try {
    return readlinkSync('/proc/self/ns/pid').replace(/\s+/g, '_');
  } catch {
    return process.platform === 'linux' || KERNEL === '-' ? `unknown:${randomBytes(6).toString('hex')}` : '-';
  }
})();

/** Whether a process of that pid exists here (one of another user still counts). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Where this process runs, as a lock file names it: for other records of live processes (daemon-instances.ts). */
export const THIS_PROCESS = { host: HOST, kernel: KERNEL, pidSpace: PID_SPACE } as const;

/**
 * Whether a process named by pid, kernel and PID namespace is certainly gone: only a process of
 * this very PID namespace on this kernel can be looked up; any other may be alive.
 */
export function processGone(owner: { pid: number; kernel: string; pidSpace: string }): boolean {
  return owner.kernel === KERNEL && owner.pidSpace === PID_SPACE && owner.pid !== process.pid && !alive(owner.pid);
}

const errno = (error: unknown) => (error as NodeJS.ErrnoException).code;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Owner {
  pid: number;
  kernel: string;
  space: string;
  host: string;
  /** Written by an earlier runguard: pid and boot id only, and no heartbeat. */
  legacy: boolean;
}

/** A lock file as found: what it says (owner null when half written or unreadable) and its inode and mtime. */
interface Found {
  owner: Owner | null;
  text: string;
  dev: number;
  ino: number;
  mtimeMs: number;
}

function parse(text: string): Owner | null {
  const [pid, kernel = '', space = '', host = '', token] = text.trim().split(' ');
  if (!Number.isInteger(Number(pid)) || Number(pid) <= 0) return null;
  return { pid: Number(pid), kernel, space, host, legacy: token === undefined };
}

/** The lock file now: null when there is none. */
async function look(lockFile: string): Promise<Found | null> {
  try {
    const [text, stats] = await Promise.all([readFile(lockFile, 'utf8'), stat(lockFile)]);
    return { owner: parse(text), text, dev: stats.dev, ino: stats.ino, mtimeMs: stats.mtimeMs };
  } catch (error) {
    if (errno(error) === 'ENOENT') return null;
    throw error;
  }
}

const samePidSpace = (owner: Owner) => !owner.legacy && owner.kernel === KERNEL && owner.space === PID_SPACE;

/** Who holds it, for a message. */
function describe(owner: Owner | null): string {
  if (!owner) return 'a process that left no name';
  if (owner.legacy || samePidSpace(owner)) return `process ${owner.pid}`;
  const where =
    owner.kernel === KERNEL ? `another PID namespace (${owner.space})` : `another machine or boot (${owner.kernel})`;
  return `process ${owner.pid} on host ${owner.host} in ${where}`;
}

interface Timing {
  staleMs: number;
  updateMs: number;
}

/**
 * Whether the lock `found` is held, stale, or not yet known: `since` is when this taker first saw
 * it with this content, inode and `firstMtimeMs`.
 */
function judge(
  lockFile: string,
  found: Found,
  firstMtimeMs: number,
  since: number,
  { staleMs }: Timing,
): 'held' | 'stale' | 'wait' {
  const { owner } = found;
  // Not refreshed for staleMs: as this taker watched it (on its own monotonic clock), or by its
  // mtime when written on this kernel, whose clock it shares (the holder sets it at once).
  const quiet =
    (found.mtimeMs === firstMtimeMs && performance.now() - since >= staleMs) ||
    ((!owner || owner.kernel === KERNEL) && KERNEL !== '-' && Date.now() - found.mtimeMs >= staleMs);
  if (owner?.legacy) {
    // An earlier runguard's lock, without a heartbeat: its pid and boot as it judged them itself,
    // less its rule that this very pid means an earlier life (which two containers share as pid 1).
    if (KERNEL !== '-' && owner.kernel && owner.kernel !== KERNEL) return 'stale';
    return owner.pid === process.pid || alive(owner.pid) ? 'held' : 'stale';
  }
  if (owner && samePidSpace(owner)) {
    if (owner.pid === process.pid) return held.has(lockFile) ? 'held' : 'stale';
    if (!alive(owner.pid)) return 'stale';
    return quiet ? 'stale' : 'held';
  }
  // In another PID namespace or on another kernel its pid means nothing here: the heartbeat tells.
  if (quiet) return 'stale';
  if (owner && found.mtimeMs !== firstMtimeMs) return 'held'; // refreshed as this taker watched
  return 'wait';
}

/**
 * Takes `lockFile` for this process; resolves to its release. A lock found held but perhaps stale
 * is waited for, at most about `staleMs`. Options (tests shorten them): `staleMs` (15 s),
 * `updateMs` (the heartbeat, 3 s), `onCompromised` (called with the error when the lock turns out
 * taken from this process; by default it throws: out of a heartbeat that ends the process, out of
 * `release` it rejects).
 */
export async function lockDirectory(
  lockFile: string,
  directory: string,
  options: { staleMs?: number; updateMs?: number; onCompromised?: (error: Error) => void } = {},
): Promise<() => Promise<void>> {
  const staleMs = options.staleMs ?? 15_000;
  const updateMs = options.updateMs ?? Math.min(3_000, staleMs / 5);
  if (!(updateMs > 0 && updateMs < staleMs))
    throw new RangeError(`lock heartbeat ${updateMs} ms must be shorter than its stale time ${staleMs} ms`);
  const timing = { staleMs, updateMs };
  const pollMs = Math.max(10, Math.min(250, updateMs / 2));
  const takeover = `${lockFile}.takeover`;
  const deadline = performance.now() + 2 * staleMs + 1_000;
  let first: { text: string; ino: number; mtimeMs: number; since: number } | null = null;
  while (performance.now() < deadline) {
    const handle = await create(lockFile);
    if (handle) return hold(lockFile, directory, handle, timing, options.onCompromised);
    const found = await look(lockFile);
    if (!found) continue; // removed this moment
    if (!first || first.text !== found.text || first.ino !== found.ino) {
      first = { text: found.text, ino: found.ino, mtimeMs: found.mtimeMs, since: performance.now() };
    }
    const verdict = judge(lockFile, found, first.mtimeMs, first.since, timing);
    if (verdict === 'held') {
      // An earlier runguard's lock names no namespace: its pid being this process's own may be a
      // container's earlier life (both pid 1), or another container's daemon. Not guessed.
      const ownPidOfOld = found.owner?.legacy === true && found.owner.pid === process.pid;
      throw new DirectoryInUseError(
        `the embedded database in ${directory} is in use by ${describe(found.owner)} (a runguard daemon?): stop it first, ` +
          `as two processes on its files would damage them (with PostgreSQL, set DATABASE_URL; if no such process ` +
          `is runguard, remove ${lockFile})` +
          (ownPidOfOld
            ? `. The lock was written by an earlier runguard and names this process's own pid: a container restarted ` +
              `as pid 1 after a crash leaves such a lock; if no other container uses this data directory, remove it`
            : ''),
      );
    }
    if (verdict === 'wait') {
      await sleep(found.owner ? pollMs : 25); // no owner yet: being written this moment
      continue;
    }
    // Stale: taken over by one process at a time. A takeover file left by a process that died
    // in those few milliseconds is itself stale after a while.
    try {
      await writeFile(takeover, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
    } catch (error) {
      if (errno(error) !== 'EEXIST') throw error;
      const age = await stat(takeover).then(
        (stats) => Date.now() - stats.mtimeMs,
        () => 0,
      );
      if (age > staleMs) await rm(takeover, { force: true });
      await sleep(25);
      continue;
    }
    try {
      // Still the very file judged stale, not refreshed since: no one took it over meanwhile.
      const now = await look(lockFile);
      if (now && now.text === found.text && now.ino === found.ino && now.mtimeMs === found.mtimeMs)
        await rm(lockFile, { force: true });
    } finally {
      await rm(takeover, { force: true });
    }
  }
  throw new DirectoryInUseError(`could not lock the embedded database in ${directory} (${lockFile})`);
}

/** Creates the lock file with this process's name in it: null when there is one already. */
async function create(lockFile: string): Promise<FileHandle | null> {
  let handle: FileHandle;
  try {
    handle = await open(lockFile, 'wx', 0o600);
  } catch (error) {
    if (errno(error) === 'EEXIST') return null;
    throw error;
  }
  // Held from this moment: another call of this process must not read its own pid in it as an
  // earlier life's.
  held.add(lockFile);
  try {
    await handle.writeFile(`${process.pid} ${KERNEL} ${PID_SPACE} ${HOST} ${randomBytes(8).toString('hex')}\n`);
    const now = new Date();
    await handle.utimes(now, now); // this host's clock, not a network file system's
    return handle;
  } catch (error) {
    held.delete(lockFile);
    await handle.close().catch(() => {});
    await rm(lockFile, { force: true });
    throw error;
  }
}

/** The heartbeat's module: plain JavaScript beside this file, in src/ and in dist/ alike. */
const HEARTBEAT_MODULE = new URL('./lock-heartbeat.js', import.meta.url);

/** Holds the lock just created: its heartbeat, and its release. */
async function hold(
  lockFile: string,
  directory: string,
  handle: FileHandle,
  { staleMs, updateMs }: Timing,
  onCompromised: (error: Error) => void = (error) => {
    throw error;
  },
): Promise<() => Promise<void>> {
  const { dev, ino } = await handle.stat();
  let lost = false;
  let released = false;
  /** Null while the file at lockFile is the one this process created; else what is there now. */
  const intruder = async (): Promise<string | null> => {
    const found = await look(lockFile);
    if (found?.dev === dev && found.ino === ino) return null;
    return found ? `the lock file now names ${describe(found.owner)}` : 'the lock file was removed';
  };
  const compromise = (why: string) => {
    lost = true;
    held.delete(lockFile);
    return new DirectoryInUseError(
      `this process (${process.pid}) lost its lock on the embedded database in ${directory}: ${why} ` +
        `(taken over while this process did not refresh it for ${staleMs} ms, or removed by hand); ` +
        `two processes on its files would damage them`,
    );
  };
  /** Reports a loss the heartbeat found: a throwing onCompromised (the default) ends the process. */
  const report = (error: Error) => {
    try {
      onCompromised(error);
    } catch (thrown) {
      setImmediate(() => {
        throw thrown; // the process ends rather than writing on
      });
    }
  };
  // A small isolate: it only stats and touches one file.
  const heartbeat = new Worker(HEARTBEAT_MODULE, {
    workerData: { lockFile, fd: handle.fd, dev, ino, updateMs, staleMs } satisfies HeartbeatData,
    resourceLimits: { maxOldGenerationSizeMb: 8, maxYoungGenerationSizeMb: 2 },
  });
  heartbeat.unref(); // the lock keeps no process alive
  heartbeat.on('message', (message: HeartbeatMessage) => {
    if (released || lost) return;
    if ('failed' in message) return report(compromise(`its heartbeat failed for ${staleMs} ms (${message.failed})`));
    void intruder().then(
      (why) => {
        if (!released && !lost) report(compromise(why ?? 'the lock file was replaced'));
      },
      (error: unknown) => report(compromise(`the lock file could not be read (${(error as Error).message})`)),
    );
  });
  heartbeat.on('error', (error) => {
    if (!released && !lost) report(compromise(`its heartbeat stopped (${error.message})`));
  });
  return async () => {
    if (released) return;
    released = true;
    await heartbeat.terminate(); // before the descriptor it uses is closed
    held.delete(lockFile);
    try {
      if (lost) return; // reported already
      const why = await intruder();
      if (why === null) await rm(lockFile, { force: true });
      else onCompromised(compromise(why)); // someone else's lock now: left in place
    } finally {
      await handle.close().catch(() => {});
    }
  };
}
