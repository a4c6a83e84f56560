/**
 * The embedded database's lock file: one holder at a time, a dead holder's lock taken over by
 * exactly one contender, and a lock naming this very pid (a container restarted as pid 1 again)
 * or written before a reboot read as stale.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DirectoryInUseError, lockDirectory } from '../../src/store/directory-lock.js';

const bootId = () => readFile('/proc/sys/kernel/random/boot_id', 'utf8').then((t) => t.trim(), () => '');
/** The pid of a process that has exited. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '0']);
  await new Promise((resolve) => child.once('exit', resolve));
  return child.pid!;
}

describe('the embedded database lock', () => {
  let dir: string;
  let lockFile: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-lock-'));
    lockFile = join(dir, 'pgdata.lock');
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('when it is held, then a second taker is refused naming the holder; released, it can be taken again', async () => {
    const release = await lockDirectory(lockFile, dir);
    await expect(lockDirectory(lockFile, dir)).rejects.toThrow(new RegExp(`in use by process ${process.pid}`));
    await release();
    await (await lockDirectory(lockFile, dir))();
  });

  it('when its holder died, then of many contenders exactly one takes it over', async () => {
    for (let round = 0; round < 20; round++) {
      await writeFile(lockFile, `${await deadPid()} ${await bootId()}\n`);
      const results = await Promise.allSettled(Array.from({ length: 4 }, () => lockDirectory(lockFile, dir)));
      const taken = results.filter((r) => r.status === 'fulfilled');
      expect(taken).toHaveLength(1);
      for (const r of results) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(DirectoryInUseError);
      await (taken[0] as PromiseFulfilledResult<() => Promise<void>>).value();
    }
  });

  it('when it names this pid but this process does not hold it (a restart as the same pid), or another boot, then it is stale', async () => {
    await writeFile(lockFile, `${process.pid} ${await bootId()}\n`);
    await (await lockDirectory(lockFile, dir))();
    await writeFile(lockFile, `1 an-earlier-boot\n`); // pid 1 is alive, but in another life
    await (await lockDirectory(lockFile, dir))();
  });
});
