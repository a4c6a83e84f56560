// Replaces dist/contract/typebox.js (tsc's `export * from 'typebox'`) with TypeBox bundled into
// that one file: the daemon then loads one module where the package has some 700, each resolved,
// read and compiled at every start (src/contract/typebox.ts says why). Run by `npm run build`
// after tsc; without it the daemon still works, loading the package's files.
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const { version } = JSON.parse(await readFile(join(root, 'node_modules', 'typebox', 'package.json'), 'utf8'));

await build({
  entryPoints: [join(root, 'src', 'contract', 'typebox.ts')],
  outfile: join(root, 'dist', 'contract', 'typebox.js'),
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  sourcemap: true,
  banner: {
    js: `// TypeBox ${version} (MIT, https://github.com/sinclairzx81/typebox), bundled by scripts/bundle-typebox.mjs.`,
  },
  logLevel: 'warning',
});
