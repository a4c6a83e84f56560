/**
 * Two daemons in one checkout, as a newcomer tries them: the embedded database first, then a
 * Postgres one on another port with the same data directory. Neither key file is overwritten, and
 * the CLI finds each daemon's key by its URL.
 */
import { readFile, rm, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { copyEmbeddedTemplate } from '../support/embedded-data-dir.js';
import { runCli, spawnDaemon, spawnDaemonOnPostgres } from '../support/daemon.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

describe('two daemons sharing a data directory', { timeout: 120_000 }, () => {
  it("when a Postgres daemon starts beside the embedded one, then it keeps its key apart and the CLI finds each daemon's key", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'rg-shared-'));
    cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
    await copyEmbeddedTemplate(dataDir);
    const embedded = await spawnDaemon({ dataDir });
    cleanups.push(() => embedded.stop());
    const embeddedKey = embedded.apiKey!;
    expect(embeddedKey).toMatch(/^lg_/);

    const postgres = await spawnDaemonOnPostgres({ dataDir });
    cleanups.push(() => postgres.close());
    // Its first start says where its own key went: not over the embedded daemon's.
    const saved = /saved to (\S+) \(mode 0600\)/.exec(postgres.stdout())?.[1];
    expect(saved).toBe(join(dataDir, `api-key.${postgres.database.name}`));
    expect((await readFile(join(dataDir, 'api-key'), 'utf8')).trim()).toBe(embeddedKey);
    const postgresKey = (await readFile(saved!, 'utf8')).trim();
    expect(postgresKey).toMatch(/^lg_/);
    expect(postgresKey).not.toBe(embeddedKey);

    const env = { RUNGUARD_DATA_DIR: dataDir };
    // Reads only, all at once: each CLI process takes a second or more on a loaded machine.
    const [lastStarted, ...each] = await Promise.all([
      // No URL: the last started; once it stops (below), the one still listening.
      runCli(['runs', 'list', '--json'], env),
      ...[embedded, postgres].flatMap((daemon) => [
        runCli(['status', '--json', '--url', daemon.url], env),
        runCli(['runs', 'list', '--json'], { ...env, RUNGUARD_URL: daemon.url }),
      ]),
    ]);
    for (const [i, result] of each.entries()) {
      const daemon = [embedded, postgres][Math.floor(i / 2)]!;
      expect(result.stderr, daemon.url).toBe('');
      expect(result.code, daemon.url).toBe(0);
    }
    expect(lastStarted.code).toBe(0);
    await postgres.stop();
    const left = await runCli(['runs', 'list', '--json'], env);
    expect(left.stderr).toBe('');
    expect(left.code).toBe(0);
  });
});
