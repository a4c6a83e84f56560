/**
 * What the CLI loads to start: a command that talks to the daemon loads the CLI's own modules,
 * not the daemon's (HTTP routes, proxy, MCP, store) nor the schema builder, which together cost
 * a second of start-up on every call. The built CLI runs with hooks that name each module
 * (loaded-modules.ts).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN } from '../support/daemon.js';
import { loadedModules } from '../support/loaded-modules.js';

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
