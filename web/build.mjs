// Builds the web dashboard into dist/dashboard/: one JavaScript and one CSS bundle, named by
// their content's hash, and an index.html that loads them (no inline script or style: the
// daemon serves it under a strict Content-Security-Policy). Prints the gzipped sizes.
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

const root = dirname(fileURLToPath(import.meta.url));
const out = join(root, '..', 'dist', 'dashboard');
await rm(out, { recursive: true, force: true });
await mkdir(join(out, 'assets'), { recursive: true });

const result = await build({
  entryPoints: { app: join(root, 'src', 'main.tsx') },
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['chrome110', 'firefox110', 'safari16'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  outdir: join(out, 'assets'),
  entryNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  metafile: true,
  legalComments: 'none',
  logLevel: 'warning',
});

const files = Object.keys(result.metafile.outputs).map((file) => basename(file));
const script = files.find((f) => f.endsWith('.js'));
const style = files.find((f) => f.endsWith('.css'));
const favicon = await readFile(join(root, 'favicon.svg'));
await writeFile(join(out, 'assets', 'favicon.svg'), favicon);
const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>runguard</title>
<link rel="icon" href="/assets/favicon.svg" type="image/svg+xml">
${style ? `<link rel="stylesheet" href="/assets/${style}">` : ''}
<script type="module" src="/assets/${script}"></script>
</head>
<body>
<div id="app"><noscript>The runguard dashboard needs JavaScript.</noscript></div>
</body>
</html>
`;
await writeFile(join(out, 'index.html'), html);

for (const file of [script, style].filter(Boolean)) {
  const bytes = await readFile(join(out, 'assets', file));
  console.log(
    `dashboard: ${file} ${(bytes.length / 1024).toFixed(1)} KiB, ${(gzipSync(bytes, { level: 9 }).length / 1024).toFixed(1)} KiB gzipped`,
  );
}
