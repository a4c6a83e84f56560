/**
 * What a Node process loads, for the tests of "nothing of X is loaded until it is asked for": a
 * child `node` run with hooks that name every module it resolves, ES modules (a resolve hook) and
 * CommonJS ones (prom-client, packages' CommonJS builds, which no ES hook sees), one `R <url or
 * path>` line each on its stderr. A child's script marks its phases with `MARK <name>` lines, and
 * a test reads what each phase loaded.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from './daemon.js';

/** ES modules: a resolve hook, which runs off the main thread... */
const ESM_HOOKS = `export async function resolve(s, c, n) { const r = await n(s, c); process.stderr.write('R ' + r.url + '\\n'); return r; }`;
/** ...registered before the child's own code, beside a wrap of the CommonJS resolver. */
const PRELOAD = `import Module, { register } from 'node:module';
register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(ESM_HOOKS)}));
const resolveFilename = Module._resolveFilename;
Module._resolveFilename = function (...args) { const r = resolveFilename.apply(this, args); process.stderr.write('R ' + r + '\\n'); return r; };`;

export interface LoadedModules {
  code: number | null;
  /** Every module the child loaded, in order: an ES module's URL, a CommonJS one's path (or a builtin's name). */
  modules: string[];
  /** What the modules between two marks are (null: the start, the end); a mark the child did not write throws. */
  between(from: string | null, to: string | null): string[];
  /** The rest of its stderr (its errors), for a failure's message. */
  errors: string;
}

export interface LoadedModulesOptions {
  /** @default the package's root */
  cwd?: string;
  /** @default PATH alone */
  env?: NodeJS.ProcessEnv;
}

/** Runs `node <args>` with every module it loads named. */
export function loadedModules(args: readonly string[], options: LoadedModulesOptions = {}): Promise<LoadedModules> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', `data:text/javascript,${encodeURIComponent(PRELOAD)}`, ...args],
      {
        cwd: options.cwd ?? ROOT,
        env: options.env ?? { PATH: process.env.PATH ?? '' },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve(listing(code, stderr)));
  });
}

function listing(code: number | null, stderr: string): LoadedModules {
  const modules: string[] = [];
  const marks = new Map<string, number>();
  const errors: string[] = [];
  for (const line of stderr.split('\n')) {
    if (line.startsWith('R ')) modules.push(line.slice(2));
    else if (line.startsWith('MARK ')) marks.set(line.slice(5), modules.length);
    else if (line) errors.push(line);
  }
  const at = (mark: string) => {
    const index = marks.get(mark);
    if (index === undefined) throw new Error(`The child wrote no mark "${mark}":\n${errors.join('\n')}`);
    return index;
  };
  return {
    code,
    modules,
    between: (from, to) => modules.slice(from === null ? 0 : at(from), to === null ? undefined : at(to)),
    errors: errors.join('\n'),
  };
}

/** `node` arguments that run `script` as an ES module (it writes its marks with `process.stderr.write`). */
export const moduleScript = (script: string): string[] => ['--input-type=module', '-e', script];

/** The URL of a built module (dist/), for a script's `import()`. */
export const builtModule = (path: string): string => pathToFileURL(join(ROOT, 'dist', path)).href;
