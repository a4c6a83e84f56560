/**
 * How the CLI finds a running daemon and its key, and how it fails: the daemon records its URL
 * beside its key and in a user-level record; every command (exec included) fails the same way,
 * naming where it looked and where the key came from.
 */
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, runCli, spawnDaemonOnPostgres, type SpawnedDaemon } from '../support/daemon.js';

let daemon: SpawnedDaemon & { close(): Promise<void> };
let scratch: string;
let userConfig: string;

beforeAll(async () => {
  daemon = await spawnDaemonOnPostgres();
  scratch = await mkdtemp(join(tmpdir(), 'rg-discovery-'));
  userConfig = join(daemon.dataDir, 'user-config'); // where test/support/daemon.ts points XDG_CONFIG_HOME
});
afterAll(async () => {
  await daemon?.close();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

describe('finding the daemon', () => {
  it('when the daemon listens on a port of its own, then it records that URL beside its key and for the user', async () => {
    for (const file of [join(daemon.dataDir, 'daemon.json'), join(userConfig, 'runguard', 'daemon.json')]) {
      const record = JSON.parse(await readFile(file, 'utf8'));
      expect(record).toMatchObject({ url: daemon.url, data_dir: daemon.dataDir, pid: daemon.process.pid });
      expect((await stat(file)).mode & 0o777).toBe(0o600);
    }
  });

  it('when the CLI runs with the data directory only (no URL, another port than 8787), then it finds the daemon', async () => {
    const res = await runCli(['status', '--json'], {
      RUNGUARD_DATA_DIR: daemon.dataDir,
      PORT: String(await freePort()),
    });
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout).health.status).toBe('ok');
  });

  it('when the CLI runs from another folder, then the user-level record gives it the URL and the key', async () => {
    const res = await runCli(['runs', 'list', '--json'], { XDG_CONFIG_HOME: userConfig }, { cwd: scratch });
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
  });

  it('when no daemon is found anywhere, then the message names every place looked, and exit 3', async () => {
    const port = await freePort();
    const res = await runCli(
      ['status'],
      { PORT: String(port), RUNGUARD_DATA_DIR: scratch, RUNGUARD_API_KEY: daemon.apiKey! },
      { cwd: scratch },
    );
    expect(res.code).toBe(3);
    expect(res.stderr).toContain(
      `cannot reach the runguard daemon at http://127.0.0.1:${port} (the URL from the configured port (${port}`,
    );
    expect(res.stderr).toContain('ECONNREFUSED');
    expect(res.stderr).toContain('Looked for a daemon in:\n  --url (not given)\n  RUNGUARD_URL (not set)\n');
    expect(res.stderr).toContain(`  ${join(scratch, 'daemon.json')} (none)\n`);
    expect(res.stderr).toContain(`  ${join(tmpdir(), 'rg-no-user-config', 'runguard', 'daemon.json')} (none)\n`);
  });

  it('when exec finds no daemon, then it fails as every command does: the same message and exit 3', async () => {
    const url = `http://127.0.0.1:${await freePort()}`;
    const res = await runCli(['exec', '--url', url, '--api-key', daemon.apiKey!, '--user', 'u', '--', 'true']);
    expect(res.code).toBe(3);
    expect(res.stderr).toBe(
      `runguard: cannot reach the runguard daemon at ${url} (the URL from --url): ECONNREFUSED. Is it running? ` +
        'Start it with `npx runguard start`, or point the CLI at it with --url or RUNGUARD_URL.\n',
    );
  });
});

describe('naming the key', () => {
  const wrongKey = `lg_aaaaaaaaaaaa_${'b'.repeat(40)}`;

  it('when --api-key is malformed, then the CLI says so without asking the daemon, for exec too', async () => {
    const flags = ['--url', daemon.url, '--api-key', 'sk-not-a-runguard-key'];
    for (const args of [
      ['runs', 'list', ...flags],
      ['exec', ...flags, '--user', 'u', '--', 'true'],
    ]) {
      const res = await runCli(args);
      expect(res.code).toBe(1);
      expect(res.stderr).toBe(
        'runguard: the API key from --api-key is not a runguard key (lg_<12 lowercase letters or digits>_<secret>).\n',
      );
    }
  });

  it('when RUNGUARD_API_KEY is refused while the key file holds another key, then the message says which won and how to use the file', async () => {
    const res = await runCli(['runs', 'list'], { RUNGUARD_API_KEY: wrongKey, RUNGUARD_DATA_DIR: daemon.dataDir });
    expect(res.code).toBe(1);
    expect(res.stderr).toBe(
      `runguard: Invalid credential: the API key from RUNGUARD_API_KEY was refused. It overrides ${join(daemon.dataDir, 'api-key')}, ` +
        'which holds another key (`npx runguard keys regenerate` rewrites that file): unset RUNGUARD_API_KEY to use it.\n',
    );
    const exec = await runCli(['exec', '--user', 'u', '--', 'true'], {
      RUNGUARD_API_KEY: wrongKey,
      RUNGUARD_DATA_DIR: daemon.dataDir,
    });
    expect(exec.code).toBe(1);
    expect(exec.stderr).toContain('the API key from RUNGUARD_API_KEY was refused. It overrides');
  });

  it('when a bearer is neither a key nor a token, then the daemon says so rather than asking for a key', async () => {
    const res = await fetch(`${daemon.url}/v1/runs`, { headers: { authorization: 'Bearer not-a-credential' } });
    expect(res.status).toBe(401);
    expect(await res.json()).toEqual({
      detail: 'The credential is neither an API key (lg_...) nor a dashboard token.',
      code: 'UNAUTHORIZED',
    });
  });
});

describe('keys regenerate with RUNGUARD_API_KEY set', () => {
  it('when the key came from the variable, then regenerate warns that the variable now holds the revoked key', async () => {
    const current = (await readFile(join(daemon.dataDir, 'api-key'), 'utf8')).trim();
    const res = await runCli(['keys', 'regenerate', '--yes'], {
      RUNGUARD_API_KEY: current,
      RUNGUARD_DATA_DIR: daemon.dataDir,
    });
    expect(res.code).toBe(0);
    expect(res.stderr).toBe(
      'runguard: warning: RUNGUARD_API_KEY in this shell holds the revoked key: export the new one, or unset it to use the key file.\n',
    );
    // The daemon rewrote its key file: without the variable, the CLI goes on working.
    expect((await runCli(['status', '--json'], { RUNGUARD_DATA_DIR: daemon.dataDir })).code).toBe(0);
  });
});

describe('when the daemon stops', () => {
  it('then its records are removed', async () => {
    await daemon.stop('SIGTERM');
    for (const file of [join(daemon.dataDir, 'daemon.json'), join(userConfig, 'runguard', 'daemon.json')]) {
      await expect(stat(file)).rejects.toMatchObject({ code: 'ENOENT' });
    }
  });
});
