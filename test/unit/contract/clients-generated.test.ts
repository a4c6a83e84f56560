/**
 * The clients carry what they need of the contract as files written by `npm run clients:generate`
 * (scripts/generate-clients.ts): the TypeScript SDK's shared/ folder, the Python client's types.py
 * and _deny_reasons.py. A change to src/contract/ that is not regenerated fails here.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { generatedClientFiles, REPO_ROOT } from '../../../scripts/generate-clients.js';

// CPU work (the generator; the TypeScript compiler): seconds on a quiet machine, but the first took
// 47 s beside the rest of test/unit on the busy two-core one (load 25), past the default 30 s.
describe('the files generated for the clients', { timeout: 120_000 }, () => {
  it('when the generator runs, then every committed file is what it writes (else: npm run clients:generate)', async () => {
    const generated = await generatedClientFiles();
    expect([...generated.keys()]).toEqual(
      expect.arrayContaining([
        'clients/typescript/src/shared/wire.ts',
        'clients/typescript/src/shared/deny-reasons.ts',
        'clients/python/src/runguard/types.py',
        'clients/python/src/runguard/_deny_reasons.py',
      ]),
    );
    for (const [path, text] of generated) expect(readFileSync(join(REPO_ROOT, path), 'utf8'), path).toBe(text);
  });

  it("when the SDK's wire types are compared with the contract's, then each is the same type", () => {
    const wire = readFileSync(join(REPO_ROOT, 'clients/typescript/src/shared/wire.ts'), 'utf8');
    const names = [...wire.matchAll(/^export type (\w+)/gm)].map((match) => match[1]!);
    expect(names).toEqual(expect.arrayContaining(['Decision', 'RunCreated', 'RunDetail', 'StepUpdateBody']));
    // A file beside the test, checked by the compiler but never written: one assertion per type.
    const checkFile = join(REPO_ROOT, 'test/unit/contract/wire-equality.check.ts');
    const check = [
      "import type * as Sdk from '../../../clients/typescript/src/shared/wire.js';",
      "import type * as Contract from '../../../src/contract/index.js';",
      'type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;',
      ...names.map((name) => `export const ${name}: Same<Sdk.${name}, Contract.${name}> = true;`),
    ].join('\n');
    const options: ts.CompilerOptions = {
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      target: ts.ScriptTarget.ES2022,
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: [],
    };
    const host = ts.createCompilerHost(options);
    const readOnDisk = host.readFile.bind(host);
    const existsOnDisk = host.fileExists.bind(host);
    host.readFile = (file) => (file === checkFile ? check : readOnDisk(file));
    host.fileExists = (file) => file === checkFile || existsOnDisk(file);
    const getOnDisk = host.getSourceFile.bind(host);
    host.getSourceFile = (file, language, ...rest) =>
      file === checkFile ? ts.createSourceFile(file, check, language) : getOnDisk(file, language, ...rest);
    const program = ts.createProgram([checkFile], options, host);
    const problems = ts
      .getPreEmitDiagnostics(program, program.getSourceFile(checkFile))
      .map((diagnostic) => ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
    expect(problems).toEqual([]);
  });
});
