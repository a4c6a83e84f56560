/**
 * What the CLI loads to start: a command that talks to the daemon loads the CLI's own modules,
 * not the daemon's (HTTP routes, proxy, MCP, store) nor the schema builder, which together cost
 * a second of start-up on every call. And what the daemon loads: the schema builder as one
 * bundled module (scripts/bundle-typebox.mjs), not its package's ~700 files. The built code runs
 * with hooks that name each module (loaded-modules.ts).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, ROOT } from '../support/daemon.js';
import { loadedModules, moduleScript } from '../support/loaded-modules.js';

const KEY = `lg_abcdefghijkl_${'x'.repeat(32)}`;

/** The TypeBox the built daemon loads: the package bundled into one module by the build. */
const BUNDLED_TYPEBOX = pathToFileURL(join(ROOT, 'dist', 'contract', 'typebox.js')).href;

/** What only the daemon needs: the daemon's rooms, and the libraries they are built on. */
const DAEMON_ONLY = [
  /\/dist\/(api|proxy|mcp|store|guard|admin|jobs|webhooks)\//,
  /\/dist\/daemon\/daemon\.js$/,
  /\/dist\/contract\/typebox\.js$/,
  /\/node_modules\/(typebox|fastify|pg|ioredis|pino|@electric-sql|@opentelemetry)\//,
];

let cwd: string;
beforeAll(async () => {
  cwd = await mkdtemp(join(tmpdir(), 'rg-start-up-'));
});
afterAll(async () => {
  if (cwd) await rm(cwd, { recursive: true, force: true });
});

/** The modules `runguard <args>` loads, and how it exited. */
const modulesOf = (args: string[]) =>
  loadedModules([BIN, ...args], { cwd, env: { PATH: process.env.PATH ?? '', HOME: cwd, XDG_CONFIG_HOME: cwd } });

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
    expect(modules.some((loaded) => loaded.endsWith('/dist/cli/main.js'))).toBe(true);
    expect(modules.filter((loaded) => DAEMON_ONLY.some((pattern) => pattern.test(loaded)))).toEqual([]);
  });
});

describe('what the daemon loads', () => {
  it('when the built daemon is loaded, then TypeBox is one bundled module, none of its package files', async () => {
    // What `runguard start` imports before it starts anything: the daemon and everything it builds on.
    const daemon = pathToFileURL(join(ROOT, 'dist', 'daemon', 'daemon.js')).href;
    const { code, modules, errors } = await loadedModules(moduleScript(`await import(${JSON.stringify(daemon)});`));
    expect(code, errors).toBe(0);
    expect(modules).toContain(daemon);
    expect(modules).toContain(BUNDLED_TYPEBOX);
    expect(modules.filter((loaded) => loaded.includes('/node_modules/typebox/'))).toEqual([]);
  });
});
