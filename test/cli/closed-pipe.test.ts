/**
 * The CLI writing into a pipe whose reader went away (`runguard runs list | head -1`): it ends
 * quietly with status 0, without a stack trace, whatever the command.
 */
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useCliDaemon } from '../support/cli-daemon.js';
import { BIN } from '../support/daemon.js';

const fixture = useCliDaemon();

/** Runs `runguard <args>` with its stdout a real pipe, closed by the reader before anything comes. */
async function runIntoClosedPipe(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: tmpdir(),
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? tmpdir(),
      XDG_CONFIG_HOME: join(tmpdir(), 'rg-no-user-config'),
      ...fixture.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // The reading end goes away at once: the command's first write meets a closed pipe.
  child.stdout.destroy();
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  return { code, stderr };
}

describe('a closed stdout', () => {
  it('when the reader of the output goes away, then every command ends with status 0 and says nothing', async () => {
    for (let i = 0; i < 3; i++) {
      expect((await fixture.api.request('POST', '/v1/runs', { user_id: `pipe-${i}` })).status).toBe(201);
    }
    const hook = await fixture.api.request('POST', '/v1/webhooks', { url: 'https://hooks.example.com/runguard' });
    expect(hook.status).toBe(201);
    const commands = [
      ['runs', 'list'],
      ['runs', 'list', '--json'],
      ['users', 'list'],
      ['webhooks', 'deliveries', (hook.body as { id: string }).id],
      ['status'],
      ['pricing', 'list'],
    ];
    // Each command on its own pipe: they run at once.
    const results = await Promise.all(commands.map((args) => runIntoClosedPipe(args)));
    for (const [i, result] of results.entries())
      expect(result, commands[i]!.join(' ')).toEqual({ code: 0, stderr: '' });
  });
});
