/**
 * What the CLI loads to start: a command that talks to the daemon loads the CLI's own modules,
 * not the daemon's (HTTP routes, proxy, MCP, store) nor the schema builder, which together cost
 * a second of start-up on every call. The built CLI runs with a hook that names each module.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN } from '../support/daemon.js';

/** Every module the child resolves, one `module <url>` line each on stderr. */
const HOOKS = `export async function resolve(s, c, n) { const r = await n(s, c); process.stderr.write('module ' + r.url + '\\n'); return r; }`;
const REGISTER = `import { register } from 'node:module'; register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(HOOKS)}));`;
const LIST_MODULES = `data:text/javascript,${encodeURIComponent(REGISTER)}`;
const KEY = `lg_abcdefghijkl_${'x'.repeat(32)}`;

/** What only the daemon needs: the daemon's rooms, and the libraries they are built on. */
const DAEMON_ONLY = [
  /\/dist\/(api|proxy|mcp|store|guard|admin|jobs|webhooks)\//,
  /\/dist\/daemon\/daemon\.js$/,
  /\/node_modules\/(typebox|fastify|pg|ioredis|pino|@electric-sql|@opentelemetry)\//,
];

let cwd: string;
beforeAll(async () => {
  cwd = await mkdtemp(join(tmpdir(), 'rg-start-up-'));
});
afterAll(async () => {
  if (cwd) await rm(cwd, { recursive: true, force: true });
});

/** The modules `runguard <args>` loads, by URL, and how it exited. */
async function modulesOf(args: string[]): Promise<{ code: number | null; modules: string[] }> {
  const child = spawn(process.execPath, ['--import', LIST_MODULES, BIN, ...args], {
    cwd,
    env: { PATH: process.env.PATH ?? '', HOME: cwd, XDG_CONFIG_HOME: cwd },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  const modules = [...stderr.matchAll(/^module (\S+)$/gm)].map((match) => match[1]!);
  return { code, modules };
}

describe('what the CLI loads to start', () => {
  // Nothing answers at port 1: a client command gets as far as its request, and exits 3.
  it.each([
    { command: '--help', status: 0 },
    { command: 'status', status: 3 },
    { command: 'runs list', status: 3 },
  ])('when `runguard $command` runs, then it loads nothing of the daemon nor TypeBox', async ({ command, status }) => {
    const args = command.split(' ');
    if (status === 3) args.push('--url', 'http://127.0.0.1:1', '--api-key', KEY);
    const { code, modules } = await modulesOf(args);
    expect(code).toBe(status);
    expect(modules.some((url) => url.endsWith('/dist/cli/main.js'))).toBe(true);
    expect(modules.filter((url) => DAEMON_ONLY.some((pattern) => pattern.test(url)))).toEqual([]);
  });
});
