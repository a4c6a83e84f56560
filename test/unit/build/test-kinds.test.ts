/**
 * test/unit/ holds the tests that need no service, and `npm run test:unit` runs that folder alone:
 * a file there must not load what starts Postgres, Redis or a daemon. That is test/support/
 * services.ts (test databases, Redis keys) and every test helper that loads it, directly or
 * through another, and the database and Redis clients themselves. Type-only imports load nothing.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../../..');
const TEST = join(ROOT, 'test');
const SERVICES = join(TEST, 'support', 'services.ts');
const SERVICE_CLIENTS = new Set(['pg', 'ioredis', '@electric-sql/pglite']);

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? filesUnder(join(dir, entry.name)) : [join(dir, entry.name)],
  );
}

/** The modules a file loads when it runs: its value imports (static and dynamic), not `import type`. */
export function runtimeImports(source: string): string[] {
  const statics = [...source.matchAll(/^\s*(?:import|export)\s+(?!type\s)(?:[^'";]*?\sfrom\s+)?['"]([^'"]+)['"]/gm)];
  const dynamics = [...source.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)];
  return [...statics, ...dynamics].map((match) => match[1]!);
}

/** The test file a relative specifier names (`.js` naming a `.ts`), or null outside test/. */
function testFileOf(from: string, specifier: string): string | null {
  if (!specifier.startsWith('.')) return null;
  const path = resolve(dirname(from), specifier);
  if (!path.startsWith(TEST + '/')) return null;
  for (const candidate of [path, path.replace(/\.js$/, '.ts'), path.replace(/\.mjs$/, '.mts')]) {
    if (existsSync(candidate)) return candidate;
  }
  return null;
}

/** How `file` reaches a service, as the chain of files that leads there; null when it does not. */
export function pathToServices(file: string, seen = new Set<string>()): string[] | null {
  if (file === SERVICES) return [file];
  if (seen.has(file)) return null;
  seen.add(file);
  for (const specifier of runtimeImports(readFileSync(file, 'utf8'))) {
    if (SERVICE_CLIENTS.has(specifier)) return [file, specifier];
    const next = testFileOf(file, specifier);
    const chain = next && pathToServices(next, seen);
    if (chain) return [file, ...chain];
  }
  return null;
}

describe('the unit tests (test/unit/)', () => {
  it('when a file under test/unit is run, then nothing it loads starts a service', () => {
    const offenders = filesUnder(join(TEST, 'unit'))
      .filter((file) => /\.(ts|js|mjs)$/.test(file))
      .map((file) => pathToServices(file))
      .filter((chain): chain is string[] => chain !== null)
      .map((chain) => chain.map((step) => (step.startsWith('/') ? relative(ROOT, step) : step)).join(' → '));
    expect(offenders).toEqual([]);
  });

  it('when a file imports the harness or a database client, then the check finds it (and not a type import)', () => {
    expect(runtimeImports("import { startTestApi } from '../support/harness.js';")).toEqual(['../support/harness.js']);
    // Spelled in two parts, so that this file's own scan does not find a dynamic import here.
    const dynamic = 'import' + "('ioredis')";
    expect(runtimeImports(`import pg from 'pg';\nconst m = await ${dynamic};`)).toEqual(['pg', 'ioredis']);
    expect(runtimeImports("import type { Harness } from '../support/harness.js';")).toEqual([]);
    const harness = join(TEST, 'support', 'harness.ts');
    expect(pathToServices(harness)?.at(-1)).toBe(SERVICES);
    expect(pathToServices(join(TEST, 'support', 'guard-snapshot.ts'))).toBeNull();
  });
});
