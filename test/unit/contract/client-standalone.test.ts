/**
 * The SDK is a package of its own (clients/typescript): at run time it loads only its own files
 * and Node's, and its wire types are the contract's, written out by `npm run clients:generate`
 * into its shared/ folder (test/unit/contract/clients-generated.test.ts keeps them current).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SRC = resolve(import.meta.dirname, '../../../clients/typescript/src');

/** The modules a file loads at run time, as the compiler emits it (type-only imports erased). */
function runtimeImports(file: string): string[] {
  const source = readFileSync(file, 'utf8');
  const { outputText } = ts.transpileModule(source, {
    // Verbatim: only `import type` is erased, as the rule for the SDK demands (not what tsc happens to elide).
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: true },
    fileName: file,
  });
  return [
    ...outputText.matchAll(/(?:^|\n)\s*(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]|import\(['"]([^'"]+)['"]\)/g),
  ].map((match) => (match[1] ?? match[2])!);
}

/** Every file reachable at run time from `entries`, and every bare specifier (package) met. */
function graph(entries: string[]): { files: string[]; packages: string[] } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const visit = (file: string) => {
    if (files.has(file)) return;
    files.add(file);
    for (const specifier of runtimeImports(file)) {
      if (specifier.startsWith('.')) visit(resolve(dirname(file), specifier.replace(/\.js$/, '.ts')));
      else packages.add(specifier);
    }
  };
  entries.forEach(visit);
  return { files: [...files].map((file) => relative(SRC, file)).sort(), packages: [...packages].sort() };
}

describe('the SDK at run time', () => {
  it('when any of its files is loaded, then it reaches only its own files and Node built-ins', () => {
    // Every file, not only the index's graph: a file loaded by nothing today may be tomorrow.
    const entries = readdirSync(SRC, { recursive: true, encoding: 'utf8' })
      .filter((name) => name.endsWith('.ts'))
      .map((name) => resolve(SRC, name));
    const { files, packages } = graph(entries);
    expect(files).toContain('shared/deny-reasons.ts');
    expect(files.filter((file) => file.startsWith('..'))).toEqual([]);
    expect(packages.filter((name) => !name.startsWith('node:'))).toEqual([]);
  });

  it('when its wire types are read, then they come from the generated copy of the contract', () => {
    const types = readFileSync(resolve(SRC, 'types.ts'), 'utf8');
    expect(types).toMatch(/import type \* as Wire from '\.\/shared\/wire\.js'/);
    expect(types).not.toMatch(/^export interface (Run|Step|RunSummary|Decision)\b/m);
  });
});
