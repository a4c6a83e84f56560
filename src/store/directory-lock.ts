/**
 * One process at a time on an embedded database's files: PGlite has no lock of its own, and a
 * second process opening the same directory (a second `runguard start`, `reconcile` or `migrate`
 * beside a running daemon) aborted, and could write beside the first. The lock is a file created
 * exclusively, holding its owner's pid and the machine's boot id. One whose owner is gone (a
 * crash, SIGKILL, a reboot, or a container restarted with the same pid as before) is taken over,
 * one process at a time: a second exclusive file guards the takeover.
 */
import { readFileSync } from 'node:fs';
import { readFile, rm, stat, writeFile } from 'node:fs/promises';

export class DirectoryInUseError extends Error {
  override name = 'DirectoryInUseError';
}

/** Lock files this process holds: its own pid in one of them otherwise means an earlier process. */
const held = new Set<string>();

/** Linux's id of this boot; a lock written before a reboot names a pid of another life. */
const BOOT_ID = (() => {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
})();

/** Whether a process of that pid exists (one of another user still counts). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const errno = (error: unknown) => (error as NodeJS.ErrnoException).code;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What a lock file says: null when it is gone or half written. */
async function ownerOf(lockFile: string): Promise<{ pid: number; boot: string; text: string } | null> {
  const text = await readFile(lockFile, 'utf8').catch(() => null);
  const [pid, boot = ''] = (text ?? '').trim().split(' ');
  return text === null || !Number.isInteger(Number(pid)) || Number(pid) <= 0 ? null : { pid: Number(pid), boot, text };
}

function inUse(lockFile: string, owner: { pid: number; boot: string }): boolean {
  if (BOOT_ID && owner.boot && owner.boot !== BOOT_ID) return false;
  if (owner.pid === process.pid) return held.has(lockFile);
  return alive(owner.pid);
}

/** Takes `lockFile` for this process; resolves to its release. */
export async function lockDirectory(lockFile: string, directory: string): Promise<() => Promise<void>> {
  const takeover = `${lockFile}.takeover`;
  for (let attempt = 0; attempt < 40; attempt++) {
    try {
      await writeFile(lockFile, `${process.pid} ${BOOT_ID}\n`, { flag: 'wx', mode: 0o600 });
      held.add(lockFile);
      return async () => {
        held.delete(lockFile);
        await rm(lockFile, { force: true });
      };
    } catch (error) {
      if (errno(error) !== 'EEXIST') throw error;
    }
    const owner = await ownerOf(lockFile);
    if (owner && inUse(lockFile, owner)) {
      throw new DirectoryInUseError(
        `the embedded database in ${directory} is in use by process ${owner.pid} (a runguard daemon?): stop it first, ` +
          `as two processes on its files would damage them (with PostgreSQL, set DATABASE_URL; if no such process ` +
          `is runguard, remove ${lockFile})`,
      );
    }
    if (!owner) {
      await sleep(25); // being written this moment, or just removed
      continue;
    }
    // Stale: taken over by one process at a time. A takeover file left by a process that died
    // in those few milliseconds is itself stale after a while.
    try {
      await writeFile(takeover, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
    } catch (error) {
      if (errno(error) !== 'EEXIST') throw error;
      const age = await stat(takeover).then((s) => Date.now() - s.mtimeMs, () => 0);
      if (age > 10_000) await rm(takeover, { force: true });
      await sleep(25);
      continue;
    }
    try {
      if ((await ownerOf(lockFile))?.text === owner.text) await rm(lockFile, { force: true });
    } finally {
      await rm(takeover, { force: true });
    }
  }
  throw new DirectoryInUseError(`could not lock the embedded database in ${directory} (${lockFile})`);
}
