/**
 * A wire type is declared once, in src/contract/: the dashboard (web/src/), the SDK
 * (clients/typescript/src/, whose shared/wire.ts is generated from the contract) and the CLI
 * (src/cli/) derive theirs from it. A type, interface or class there named like an
 * export of the contract is a hand-kept copy unless it refers to something imported from the
 * contract (`type Workspace = WireWorkspace & ...`, `type RunEnded = Wire.RunEnded`).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../../..');
const CLIENT_SIDES = ['web/src', 'clients/typescript/src', 'src/cli'];
/** The SDK's copy of the contract, written by `npm run clients:generate` (test/unit/contract/clients-generated.test.ts). */
const GENERATED = 'clients/typescript/src/shared';

/** Every name src/contract/index.ts exports, types and values alike. */
function contractExports(): Set<string> {
  const index = join(ROOT, 'src/contract/index.ts');
  const program = ts.createProgram([index], {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    noEmit: true,
    skipLibCheck: true,
  });
  const checker = program.getTypeChecker();
  const module = checker.getSymbolAtLocation(program.getSourceFile(index)!)!;
  return new Set(checker.getExportsOfModule(module).map((symbol) => symbol.name));
}

const sourceFiles = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return /\.tsx?$/.test(entry.name) && !entry.name.endsWith('.d.ts') ? [path] : [];
  });

/** `file:line Name` for each declaration in the file named like a contract export and not derived from it. */
function copiesIn(file: string, wireNames: Set<string>): string[] {
  const text = readFileSync(file, 'utf8');
  const source = ts.createSourceFile(
    file,
    text,
    ts.ScriptTarget.Latest,
    true,
    file.endsWith('.tsx') ? ts.ScriptKind.TSX : ts.ScriptKind.TS,
  );
  // The local names this file imports from the contract (`Wire` of `import type * as Wire`, too).
  const fromContract = new Set<string>();
  for (const statement of source.statements) {
    if (!ts.isImportDeclaration(statement) || !ts.isStringLiteral(statement.moduleSpecifier)) continue;
    if (!/\/contract(\/|$)|\/shared\/wire\.js$/.test(statement.moduleSpecifier.text)) continue;
    const clause = statement.importClause;
    if (clause?.name) fromContract.add(clause.name.text);
    const bindings = clause?.namedBindings;
    if (bindings && ts.isNamespaceImport(bindings)) fromContract.add(bindings.name.text);
    if (bindings && ts.isNamedImports(bindings))
      for (const named of bindings.elements) fromContract.add(named.name.text);
  }
  const refersToContract = (node: ts.Node): boolean =>
    (ts.isIdentifier(node) && fromContract.has(node.text)) || ts.forEachChild(node, refersToContract) === true;

  const copies: string[] = [];
  const visit = (node: ts.Node) => {
    if (
      (ts.isInterfaceDeclaration(node) || ts.isTypeAliasDeclaration(node) || ts.isClassDeclaration(node)) &&
      node.name &&
      wireNames.has(node.name.text)
    ) {
      const derived = node.getChildren().some((child) => child !== node.name && refersToContract(child));
      if (!derived) {
        const line = source.getLineAndCharacterOfPosition(node.getStart()).line + 1;
        copies.push(`${relative(ROOT, file)}:${line} ${node.name.text}`);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return copies;
}

describe('wire types', () => {
  const wireNames = contractExports();

  it('when the contract is read, then it exports the wire types the check compares against', () => {
    // A broken read of the index would make the check below pass on nothing.
    expect(wireNames.size).toBeGreaterThan(50);
    for (const name of ['Workspace', 'RunSummary', 'WebhookReplay', 'SdkUser']) expect(wireNames).toContain(name);
  });

  it('when the dashboard, the SDK or the CLI names a wire type, then it derives it from the contract', () => {
    const files = CLIENT_SIDES.flatMap((dir) => sourceFiles(join(ROOT, dir))).filter(
      (file) => !file.startsWith(join(ROOT, GENERATED)),
    );
    expect(files.length).toBeGreaterThan(20);
    expect(files.flatMap((file) => copiesIn(file, wireNames))).toEqual([]);
  });
});
