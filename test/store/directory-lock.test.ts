/**
 * The embedded database's lock file: one holder at a time, a dead holder's lock taken over by
 * exactly one contender, at once when it died in this PID namespace and once its heartbeat has
 * stopped for the stale time when it ran in another (a container: a pid from there means nothing
 * here, and two containers' daemons are both pid 1), and a release that removes only its own lock.
 * The holders are real processes, in PID namespaces of their own where `unshare` can make them.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, readlink, rm, utimes, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DirectoryInUseError, lockDirectory } from '../../src/store/embedded/directory-lock.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const LOCK_MODULE = pathToFileURL(join(ROOT, 'src/store/embedded/directory-lock.ts')).href;
/** Whether this machine lets us start processes as pid 1 of PID namespaces of their own (root on Linux). */
const canUnshare =
  process.platform === 'linux' &&
  spawnSync('unshare', ['-p', '-f', '--mount-proc', 'true'], { stdio: 'ignore' }).status === 0;
/** CI (`.ci/run`, root on Linux) runs the namespace tests whatever: there, a failing unshare fails them, never skips them. */
const namespaceTests = canUnshare || process.env.CI === 'true';

const bootId = () =>
  readFile('/proc/sys/kernel/random/boot_id', 'utf8').then(
    (t) => t.trim(),
    () => '',
  );
const pidSpace = () => readlink('/proc/self/ns/pid');
/** A lock file's line as a holder in this PID namespace writes it. */
const ourLine = async (pid: number) => `${pid} ${await bootId()} ${await pidSpace()} ${hostname()} 0123456789abcdef\n`;
/** The pid of a process that has exited (`true`: a node process would take a hundred times as long to start). */
async function deadPid(): Promise<number> {
  const child = spawn('true');
  await new Promise((resolve) => child.once('exit', resolve));
  return child.pid!;
}
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A process that takes the lock and holds it until told `release` or its stdin closes. */
const HOLDER = `
import { dirname } from 'node:path';
const { lockDirectory } = await import(process.argv[2]);
const [lockFile, staleMs, updateMs, onLoss] = process.argv.slice(3);
const say = (line) => process.stdout.write(line + '\\n');
try {
  const release = await lockDirectory(lockFile, dirname(lockFile), {
    staleMs: Number(staleMs), updateMs: Number(updateMs),
    ...(onLoss === 'default' ? {} : { onCompromised: (e) => say('compromised ' + e.message) }),
  });
  say('held ' + process.pid);
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', async (d) => {
    if (d.includes('release')) { await release(); say('released'); }
    // The main thread busy (as in PGlite's synchronous WASM) for the given milliseconds.
    const busy = /busy (\\d+)/.exec(d);
    if (busy) { say('busy'); const end = Date.now() + Number(busy[1]); while (Date.now() < end); say('busy done'); }
  });
  process.stdin.on('end', () => process.exit(0));
} catch (e) {
  say('refused ' + e.message);
  process.exit(3);
}
`;

interface Holder {
  child: ChildProcess;
  stderr(): string;
  /** The first line starting with `prefix`, waited for. */
  line(prefix: string, timeoutMs?: number): Promise<string>;
  exited: Promise<unknown>;
}

const STALE_MS = 1_500;
const UPDATE_MS = 200;

describe('the embedded database lock', () => {
  let dir: string;
  let lockFile: string;
  let script: string;
  const holders: Holder[] = [];
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-lock-'));
    lockFile = join(dir, 'pgdata.lock');
    script = join(dir, 'holder.mjs');
    await writeFile(script, HOLDER);
  });
  afterEach(async () => {
    for (const h of holders.splice(0)) {
      h.child.kill('SIGKILL');
      await h.exited;
    }
    await rm(dir, { recursive: true, force: true });
  });

  /**
   * Starts a holder: here, or as pid 1 of a PID namespace of its own (`namespace`), or there with
   * pid `nsPid`. Killing the `unshare` process kills the whole namespace (--kill-child).
   */
  function holder(where: { namespace?: boolean; nsPid?: number; onLoss?: 'default' } = {}): Holder {
    const node = [
      process.execPath,
      '--import',
      'tsx',
      script,
      LOCK_MODULE,
      lockFile,
      String(STALE_MS),
      String(UPDATE_MS),
      where.onLoss ?? 'report',
    ];
    const inside = where.nsPid
      ? ['sh', '-c', `echo ${where.nsPid - 1} > /proc/sys/kernel/ns_last_pid && "$@"; exit $?`, 'sh', ...node]
      : node;
    const argv =
      where.namespace || where.nsPid ? ['unshare', '-p', '-f', '--mount-proc', '--kill-child', ...inside] : node;
    const child = spawn(argv[0]!, argv.slice(1), { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
    let err = '';
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const lines: string[] = [];
    const waiters: Array<() => void> = [];
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const parts = out.split('\n');
      out = parts.pop()!;
      lines.push(...parts);
      for (const w of waiters.splice(0)) w();
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const h: Holder = {
      child,
      exited,
      stderr: () => err,
      line: (prefix, timeoutMs = 10_000) =>
        new Promise((resolve, reject) => {
          const timer = setTimeout(
            () => reject(new Error(`no line "${prefix}" in ${JSON.stringify(lines)}`)),
            timeoutMs,
          );
          const check = () => {
            const found = lines.find((l) => l.startsWith(prefix));
            if (found !== undefined) {
              clearTimeout(timer);
              resolve(found);
            } else waiters.push(check);
          };
          check();
        }),
    };
    holders.push(h);
    return h;
  }

  it('when it is held, then a second taker is refused naming the holder; released, it can be taken again', async () => {
    const release = await lockDirectory(lockFile, dir);
    await expect(lockDirectory(lockFile, dir)).rejects.toThrow(new RegExp(`in use by process ${process.pid} `));
    await release();
    await (
      await lockDirectory(lockFile, dir)
    )();
  });

  it('when its holder died, then of many contenders exactly one takes it over', async () => {
    for (let round = 0; round < 20; round++) {
      // This namespace's format, and an earlier runguard's (pid and boot only).
      await writeFile(lockFile, round % 2 ? await ourLine(await deadPid()) : `${await deadPid()} ${await bootId()}\n`);
      const results = await Promise.allSettled(Array.from({ length: 4 }, () => lockDirectory(lockFile, dir)));
      const taken = results.filter((r) => r.status === 'fulfilled');
      expect(taken).toHaveLength(1);
      for (const r of results) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(DirectoryInUseError);
      await (taken[0] as PromiseFulfilledResult<() => Promise<void>>).value();
    }
  });

  it('when it names this pid in this PID namespace but this process does not hold it, or its heartbeat on this kernel stopped long ago, then it is stale at once', async () => {
    await writeFile(lockFile, await ourLine(process.pid));
    let start = Date.now();
    await (
      await lockDirectory(lockFile, dir)
    )();
    expect(Date.now() - start).toBeLessThan(1_000);
    // pid 1 of another namespace on this kernel, not refreshed for a minute
    await writeFile(lockFile, `1 ${await bootId()} pid:[1] another-container 0123456789abcdef\n`);
    const aMinuteAgo = new Date(Date.now() - 60_000);
    await utimes(lockFile, aMinuteAgo, aMinuteAgo);
    start = Date.now();
    await (
      await lockDirectory(lockFile, dir)
    )();
    expect(Date.now() - start).toBeLessThan(1_000);
  });

  it('when it was written on another kernel (another boot or machine, whose clock may differ), then it is stale once seen still for the stale time', async () => {
    await writeFile(lockFile, `1 an-earlier-boot pid:[1] elsewhere 0123456789abcdef\n`);
    const aMinuteAgo = new Date(Date.now() - 60_000);
    await utimes(lockFile, aMinuteAgo, aMinuteAgo);
    const start = Date.now();
    await (
      await lockDirectory(lockFile, dir, { staleMs: STALE_MS, updateMs: UPDATE_MS })
    )();
    expect(Date.now() - start).toBeGreaterThanOrEqual(STALE_MS - 100);
    expect(Date.now() - start).toBeLessThan(STALE_MS + 1_000);
  });

  it('when it names this very pid in another PID namespace (two containers, both pid 1), then it is held until its heartbeat has been still for the stale time', async () => {
    await writeFile(lockFile, `${process.pid} ${await bootId()} pid:[1] another-container 0123456789abcdef\n`);
    const start = Date.now();
    const release = await lockDirectory(lockFile, dir, { staleMs: STALE_MS, updateMs: UPDATE_MS });
    expect(Date.now() - start).toBeGreaterThanOrEqual(STALE_MS - 100);
    await release();
    // An earlier runguard's lock naming this pid may be another container's too: held.
    await writeFile(lockFile, `${process.pid} ${await bootId()}\n`);
    await expect(lockDirectory(lockFile, dir, { staleMs: STALE_MS, updateMs: UPDATE_MS })).rejects.toThrow(
      new RegExp(`in use by process ${process.pid} `),
    );
  });

  it.skipIf(!namespaceTests)(
    'when a daemon runs as pid 1 in a PID namespace, then another pid 1 in another namespace is refused, naming it',
    async () => {
      const first = holder({ namespace: true });
      expect(await first.line('held')).toBe('held 1');
      const owner = await readFile(lockFile, 'utf8');
      const second = holder({ namespace: true });
      const refused = await second.line('refused', 20_000);
      expect(refused).toMatch(/is in use by process 1 on host \S+ in another PID namespace \(pid:\[\d+\]\)/);
      expect(await second.exited).toBe(3);
      expect(await readFile(lockFile, 'utf8')).toBe(owner); // the first holds it still
    },
  );

  it.skipIf(!namespaceTests)(
    'when its holder runs in another PID namespace with a pid that is dead here, then it is not taken over',
    async () => {
      let nsPid = 30_000;
      while (alive(nsPid)) nsPid++;
      const owner = holder({ nsPid });
      expect(await owner.line('held')).toBe(`held ${nsPid}`);
      // A stale time far above a loaded machine's delays: a taker that waited it out instead of
      // refusing once it saw the heartbeat move would take longer than it.
      const staleMs = 20_000;
      const start = Date.now();
      await expect(lockDirectory(lockFile, dir, { staleMs, updateMs: UPDATE_MS })).rejects.toThrow(
        new RegExp(`in use by process ${nsPid} on host .* in another PID namespace`),
      );
      expect(Date.now() - start).toBeLessThan(staleMs); // refused once its heartbeat was seen
      expect(await readFile(lockFile, 'utf8')).toMatch(new RegExp(`^${nsPid} `));
    },
  );

  it('when a process that no longer holds it releases it, then the holder’s lock stays, and the loss is reported', async () => {
    const lost: Error[] = [];
    // No heartbeat before the release: the release itself finds the lock not its own.
    const release = await lockDirectory(lockFile, dir, {
      staleMs: 60_000,
      updateMs: 30_000,
      onCompromised: (e) => lost.push(e),
    });
    await rm(lockFile); // taken from under it
    const other = holder();
    const held = await other.line('held');
    const theirs = await readFile(lockFile, 'utf8');
    await release();
    expect(await readFile(lockFile, 'utf8')).toBe(theirs);
    expect(lost).toHaveLength(1);
    expect(lost[0]!.message).toContain(
      `lost its lock on the embedded database in ${dir}: the lock file now names process ${held.split(' ')[1]}`,
    );
    // With no onCompromised, the release rejects.
    const mine = await lockDirectory(join(dir, 'other.lock'), dir);
    await rm(join(dir, 'other.lock'));
    await expect(mine()).rejects.toThrow(/lost its lock .* the lock file was removed/);
  });

  it('when a holder frozen past the stale time was taken over, then it reports the loss and its release leaves the new lock', async () => {
    const frozen = holder();
    await frozen.line('held');
    frozen.child.kill('SIGSTOP'); // alive, but its heartbeat stops
    await new Promise((resolve) => setTimeout(resolve, STALE_MS));
    const release = await lockDirectory(lockFile, dir, { staleMs: STALE_MS, updateMs: UPDATE_MS });
    const ours = await readFile(lockFile, 'utf8');
    frozen.child.kill('SIGCONT');
    expect(await frozen.line('compromised', 5_000)).toContain(`the lock file now names process ${process.pid}`);
    frozen.child.stdin!.write('release\n');
    await frozen.line('released');
    expect(await readFile(lockFile, 'utf8')).toBe(ours);
    await release();
  });

  it('when a holder left to the default finds its lock taken from it, then it ends with the error', async () => {
    const owner = holder({ onLoss: 'default' });
    await owner.line('held');
    await rm(lockFile);
    const still = new Promise((resolve) => setTimeout(resolve, 5_000, 'still running'));
    expect(await Promise.race([owner.exited, still])).toBe(1);
    expect(owner.stderr()).toMatch(
      /DirectoryInUseError: this process \(\d+\) lost its lock on the embedded database in .*: the lock file was removed/,
    );
  });

  it("when its holder's main thread is busy past the stale time (a long PGlite query), then it keeps its lock: takers are refused, and it goes on", async () => {
    const owner = holder();
    await owner.line('held');
    owner.child.stdin!.write(`busy ${STALE_MS + 1_500}\n`);
    await owner.line('busy');
    await new Promise((r) => setTimeout(r, STALE_MS + 500)); // past the stale time, the holder still busy
    await expect(lockDirectory(lockFile, dir, { staleMs: STALE_MS, updateMs: UPDATE_MS })).rejects.toThrow(
      `in use by process ${owner.child.pid}`,
    );
    await owner.line('busy done');
    await new Promise((r) => setTimeout(r, 2 * UPDATE_MS));
    owner.child.stdin!.write('release\n');
    await owner.line('released');
    expect(alive(owner.child.pid!)).toBe(true);
  });

  it('when one process takes it twice at once, then exactly one take succeeds, round after round', async () => {
    for (let round = 0; round < 50; round++) {
      const takes = await Promise.allSettled(
        [0, 1, 2].map(() => lockDirectory(lockFile, dir, { staleMs: STALE_MS, updateMs: UPDATE_MS })),
      );
      const won = takes.filter((t): t is PromiseFulfilledResult<() => Promise<void>> => t.status === 'fulfilled');
      expect(won, `round ${round}`).toHaveLength(1);
      await won[0]!.value();
    }
  });

  it('when its holder in this namespace is killed (SIGKILL), then the lock is taken over at once', async () => {
    const owner = holder();
    await owner.line('held');
    owner.child.kill('SIGKILL');
    await owner.exited;
    const start = Date.now();
    await (
      await lockDirectory(lockFile, dir)
    )(); // the default stale time is not waited for
    expect(Date.now() - start).toBeLessThan(1_000);
  });

  it.skipIf(!namespaceTests)(
    'when its holder in another PID namespace is killed (SIGKILL), then the lock is taken over within the stale time',
    async () => {
      const owner = holder({ namespace: true });
      expect(await owner.line('held')).toBe('held 1');
      owner.child.kill('SIGKILL'); // unshare, and with it the namespace's pid 1
      await owner.exited;
      const start = Date.now();
      const release = await lockDirectory(lockFile, dir, { staleMs: STALE_MS, updateMs: UPDATE_MS });
      expect(Date.now() - start).toBeLessThan(STALE_MS + 500);
      expect(await readFile(lockFile, 'utf8')).toMatch(new RegExp(`^${process.pid} `));
      await release();
    },
  );
});
