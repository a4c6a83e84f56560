/**
 * The built package as a user's Node loads it (dist/, built first by `npm test`): what its
 * exports resolve to, and the files it needs beside its modules at run time.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

beforeAll(() => {
  if (!existsSync(join(ROOT, 'clients', 'typescript', 'dist', 'index.js')))
    throw new Error('these tests read dist/: build first with `npm run build`.');
});

/** Imports `specifier` in a fresh Node, resolved from the package's root as its own name. */
function exportsOf(specifier: string): string[] {
  const script = `const m = await import(${JSON.stringify(specifier)}); console.log(JSON.stringify(Object.keys(m).sort()));`;
  return JSON.parse(
    execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' }),
  ) as string[];
}

describe('the built package', () => {
  it('when a user imports runguard or runguard/client, then both give the SDK package, @runguard/client', () => {
    const client = exportsOf('runguard/client');
    expect(client).toContain('GuardClient');
    expect(exportsOf('runguard')).toEqual(client);
    expect(exportsOf(join(ROOT, 'clients/typescript/dist/index.js'))).toEqual(client);
  });

  it('when the embedded lock is taken from dist/, then its heartbeat worker loads from dist/ and refreshes the lock', async () => {
    expect(existsSync(join(ROOT, 'dist', 'store', 'embedded', 'lock-heartbeat.js'))).toBe(true);
    const { lockDirectory } = (await import(
      pathToFileURL(join(ROOT, 'dist', 'store', 'embedded', 'directory-lock.js')).href
    )) as typeof import('../../src/store/embedded/directory-lock.js');
    const dir = await mkdtemp(join(tmpdir(), 'rg-dist-lock-'));
    const lockFile = join(dir, 'lock');
    const losses: Error[] = [];
    try {
      const release = await lockDirectory(lockFile, dir, {
        staleMs: 5_000,
        updateMs: 50,
        onCompromised: (error) => losses.push(error),
      });
      const first = (await stat(lockFile)).mtimeMs;
      // Polled, not timed: the heartbeat has run once the mtime moves.
      while ((await stat(lockFile)).mtimeMs === first && losses.length === 0)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(losses).toEqual([]);
      await release();
      expect(existsSync(lockFile)).toBe(false);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
