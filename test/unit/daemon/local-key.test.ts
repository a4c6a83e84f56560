/** The key a local daemon keeps in its data directory, replaced when it is regenerated. */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalKeyFile } from '../../../src/daemon/local-key.js';

const K0 = 'lg_aaaaaaaaaaaa_zero';
const K1 = 'lg_bbbbbbbbbbbb_one';
const K2 = 'lg_cccccccccccc_two';

describe('the local key file', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rg-key-'));
    await writeFile(join(dir, 'api-key'), `${K0}\n`);
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it("when the workspace that holds the kept key is regenerated, then the file and the copy take the new key; another workspace's leaves them", async () => {
    const file = await LocalKeyFile.open(dir);
    expect(await file.regenerated(['zzzzzzzzzzzz'], K1)).toBe(false);
    expect(file.current).toBe(K0);
    expect(await file.regenerated(['aaaaaaaaaaaa'], K1)).toBe(true);
    expect(file.current).toBe(K1);
    expect((await readFile(join(dir, 'api-key'), 'utf8')).trim()).toBe(K1);
  });

  it('when two regenerations overlap, then the file ends with the key of the last, not a revoked one', async () => {
    const file = await LocalKeyFile.open(dir);
    const [first, second] = await Promise.all([
      file.regenerated(['aaaaaaaaaaaa'], K1),
      file.regenerated(['bbbbbbbbbbbb'], K2),
    ]);
    expect([first, second]).toEqual([true, true]);
    expect((await readFile(join(dir, 'api-key'), 'utf8')).trim()).toBe(K2);
    expect(file.current).toBe(K2);
  });
});
