/**
 * A clone of the repository, with nothing beside it, must build and pass its tests: no code,
 * script, test or package script may read a path outside the repository (the price dataset the
 * catalog is generated from once lived in a folder next to the clone).
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { datasetDir, REPO_ROOT } from '../../../scripts/pricing-catalog.js';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const SCANNED = ['src', 'scripts', 'test', 'bin', 'bench', 'package.json', 'Dockerfile', 'compose.yaml'];
// Built from parts so that this file does not find itself.
const OUTSIDE = new RegExp(['\\.\\./', 'shared', '|', '/work/', 'shared'].join(''));

/** The files at `path` (a file, or every file under a folder); none when it does not exist. */
function filesAt(path: string): string[] {
  const full = join(ROOT, path);
  if (!existsSync(full)) return [];
  if (statSync(full).isFile()) return [full];
  return readdirSync(full, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && !entry.parentPath.includes(`${sep}node_modules`))
    .map((entry) => join(entry.parentPath, entry.name));
}

describe('the repository stands alone', () => {
  it('when the price catalog is generated or checked, then the dataset it reads is the copy inside the repository', () => {
    const dir = datasetDir();
    expect(relative(REPO_ROOT, dir).startsWith('..')).toBe(false);
    for (const name of ['openai.json', 'anthropic.json', 'google.json', 'LICENSE', 'README.md']) {
      expect(existsSync(join(dir, name)), name).toBe(true);
    }
    expect(readFileSync(join(dir, 'LICENSE'), 'utf8')).toMatch(/^MIT License/);
  });

  it('when the sources, scripts, tests and package scripts are read, then none names a folder beside the clone', () => {
    const offenders = SCANNED.flatMap(filesAt).filter((file) => OUTSIDE.test(readFileSync(file, 'utf8')));
    expect(offenders.map((file) => relative(ROOT, file))).toEqual([]);
  });
});
