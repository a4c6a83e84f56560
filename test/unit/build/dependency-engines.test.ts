/**
 * The installed dependency tree against the Node versions package.json's `engines` promises: a
 * package whose own `engines.node` leaves out one of them makes `npm install` print EBADENGINE on
 * a Node we say we support (cookie@2 wants Node >= 22, and fastify's light-my-request@6.8 pulls it).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));

interface InstalledPackage {
  name: string;
  version: string;
  engines?: { node?: unknown } | unknown[];
}

function readManifest(directory: string): InstalledPackage {
  return JSON.parse(readFileSync(join(directory, 'package.json'), 'utf8')) as InstalledPackage;
}

/** Every package under `nodeModules`, nested node_modules included (npm nests a version that clashes). */
function installedPackages(nodeModules: string): InstalledPackage[] {
  if (!existsSync(nodeModules)) return [];
  const found: InstalledPackage[] = [];
  for (const entry of readdirSync(nodeModules)) {
    if (entry.startsWith('.')) continue; // .bin, .package-lock.json
    const directories = entry.startsWith('@')
      ? readdirSync(join(nodeModules, entry)).map((scoped) => join(nodeModules, entry, scoped))
      : [join(nodeModules, entry)];
    for (const directory of directories) {
      if (!existsSync(join(directory, 'package.json'))) continue;
      found.push(readManifest(directory));
      found.push(...installedPackages(join(directory, 'node_modules')));
    }
  }
  return found;
}

/** The lowest Node of each line a range allows: `^20.19.0 || >=22.13.0` gives 20.19.0 and 22.13.0. */
function lowestOfEachLine(range: string): string[] {
  return new semver.Range(range).set.map((comparators) => {
    const lowest = semver.minVersion(comparators.map((comparator) => comparator.value).join(' '));
    if (lowest === null) throw new Error(`engines.node "${range}" allows no version`);
    return lowest.version;
  });
}

/** One line per package whose engines.node refuses a Node that `promised` allows. */
function enginesRefusing(packages: InstalledPackage[], promised: string): string[] {
  const nodes = lowestOfEachLine(promised);
  const refusals: string[] = [];
  for (const pkg of packages) {
    // An array is the long-gone engines form that npm ignores.
    const wanted = pkg.engines && !Array.isArray(pkg.engines) ? pkg.engines.node : undefined;
    if (typeof wanted !== 'string') continue;
    const refused = nodes.filter((node) => !semver.satisfies(node, wanted));
    if (refused.length > 0)
      refusals.push(`${pkg.name}@${pkg.version} wants Node ${wanted}, refusing ${refused.join(', ')}`);
  }
  return refusals;
}

const ownManifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  engines: { node: string };
  dependencies: Record<string, string>;
  overrides?: Record<string, unknown>;
};

/**
 * The names in the tree a consumer installs: the dependencies, theirs, and so on, each found as
 * Node finds it (the nearest node_modules up from the package that needs it).
 */
function productionTree(): Set<string> {
  const names = new Set<string>();
  const visit = (name: string, from: string) => {
    for (let directory = from; ; directory = join(directory, '..', '..')) {
      const candidate = join(directory, 'node_modules', name);
      if (existsSync(join(candidate, 'package.json'))) {
        if (names.has(`${name}@${candidate}`)) return;
        names.add(`${name}@${candidate}`);
        const manifest = JSON.parse(readFileSync(join(candidate, 'package.json'), 'utf8')) as {
          dependencies?: Record<string, string>;
        };
        for (const dependency of Object.keys(manifest.dependencies ?? {})) visit(dependency, candidate);
        return;
      }
      if (directory === ROOT || directory.length <= ROOT.length) return;
    }
  };
  for (const dependency of Object.keys(ownManifest.dependencies)) visit(dependency, ROOT);
  return new Set([...names].map((entry) => entry.slice(0, entry.indexOf('@', 1))));
}

describe("the dependency tree's engines", () => {
  it('when the engines promise Node 20 and 22, then the lowest of each line is what a dependency must accept', () => {
    expect(lowestOfEachLine(ownManifest.engines.node)).toEqual(['20.19.0', '22.13.0']);
  });

  it('when a tree holds cookie@2.0.2, then it is named as refusing Node 20', () => {
    const tree = [
      { name: 'light-my-request', version: '6.8.1' },
      { name: 'cookie', version: '2.0.2', engines: { node: '>=22' } },
      { name: 'old-style', version: '1.0.0', engines: ['node >= 0.4'] },
    ];
    expect(enginesRefusing(tree, ownManifest.engines.node)).toEqual(['cookie@2.0.2 wants Node >=22, refusing 20.19.0']);
  });

  it('when the installed tree is read, then every package accepts every Node line that engines promises', () => {
    const packages = installedPackages(join(ROOT, 'node_modules'));
    expect(packages.length).toBeGreaterThan(100);
    expect(enginesRefusing(packages, ownManifest.engines.node)).toEqual([]);
  });

  it("when a consumer installs the package, then no pin is lost: no override names a package of the consumer's tree", () => {
    // npm applies `overrides` only in the root project: a pin that a consumer's tree needs (as
    // light-my-request@6.6.0 keeps cookie@1 and Node 20) must be a dependency to reach it. An
    // override of a development tool's package (the bench's Portkey gateway) reaches no consumer.
    const tree = productionTree();
    expect(tree.has('fastify') && tree.has('cookie')).toBe(true);
    expect(Object.keys(ownManifest.overrides ?? {}).filter((name) => tree.has(name))).toEqual([]);
  });
});
