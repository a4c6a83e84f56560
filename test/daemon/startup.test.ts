/** Configuration, migrations, first-start bootstrap and the embedded database across restarts. */
import { chmod, mkdir, mkdtemp, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { PassThrough } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bootstrapWorkspace } from '../../src/daemon/bootstrap.js';
import { ConfigError, loadConfig } from '../../src/config.js';
import { startDaemon } from '../../src/daemon/daemon.js';
import { createLogger } from '../../src/logger.js';
import { embeddedDb, postgresDb } from '../../src/store/db.js';
import { migrate } from '../../src/store/migrations.js';
import { ApiKeyVerifier } from '../../src/admin/api-key-verifier.js';
import { copyEmbeddedTemplate } from '../support/embedded-data-dir.js';
import { createTestDatabase } from '../support/services.js';

/**
 * How long a test may take that creates an embedded database from nothing (PGlite's initdb, then
 * every migration): ~20 s alone, more than the suite's 30 s default at a load average of ~7.
 */
const FIRST_START_TIMEOUT_MS = 120_000;

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

describe('configuration', () => {
  it('when nothing is set, then the defaults: loopback, port 8787, embedded database, SQL counters', () => {
    expect(loadConfig({})).toMatchObject({
      host: '127.0.0.1',
      port: 8787,
      databaseUrl: null,
      redisUrl: null,
      dataDir: '.runguard',
      defaultPlan: 'scale',
    });
  });

  it('when environment variables and flags are set, then flags win over the environment', () => {
    const config = loadConfig({ PORT: '9000', HOST: '0.0.0.0', REDIS_URL: 'redis://x:6379' }, { port: '9100' });
    expect(config).toMatchObject({ port: 9100, host: '0.0.0.0', redisUrl: 'redis://x:6379' });
  });

  it.each([
    [{ PORT: 'abc' }, /environment variable PORT must be an integer/],
    [{ PORT: '70000' }, /PORT must be an integer from 0 to 65535/],
    [{ DATABASE_URL: 'mysql://x' }, /DATABASE_URL must be a postgres: or postgresql: URL/],
    [{ RUNGUARD_DEFAULT_PLAN: 'gold' }, /RUNGUARD_DEFAULT_PLAN must be one of basic, pro, scale, enterprise/],
    [{ RUNGUARD_JWT_SECRET: 'short' }, /RUNGUARD_JWT_SECRET must be at least 32 characters/],
    [{ RUNGUARD_SCRYPT_COST: '3000' }, /must be a power of two/],
  ])('when %o is invalid, then start-up stops with a message naming the key', (env, message) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });

  it.each([
    ['DATABASE_URL', 'postgres://runguard:Xk9/pQ2s+secretpw@db.internal:5432/runguard'],
    ['REDIS_URL', 'redis://:S3cr3t#pw/x@cache:6379'],
    ['RUNGUARD_JWT_SECRET', 'secretsecretsecretsecretsecret1'],
  ])(
    'when %s is invalid, then the message names it without echoing the value (it may hold a password)',
    (name, value) => {
      expect(() => loadConfig({ [name]: value })).toThrow(
        new RegExp(`environment variable ${name} .*\\(got a value of ${value.length} characters, not shown\\)`),
      );
      let message = '';
      try {
        loadConfig({ [name]: value });
      } catch (error) {
        message = (error as Error).message;
      }
      expect(message).not.toMatch(/secret|S3cr3t/);
    },
  );

  it('when nothing is set, then a dead daemon is found within 60 s: a 30 s lease, beaten every 5 s, looked for every 5 s', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      daemonHeartbeatIntervalMs: 5_000,
      daemonLeaseMs: 30_000,
      resultRecoveryIntervalMs: 5_000,
    });
    expect(config.daemonLeaseMs + config.resultRecoveryIntervalMs).toBeLessThanOrEqual(60_000);
  });

  it('when the lease is shorter than two heartbeats, then start-up stops naming both keys', () => {
    expect(() =>
      loadConfig({ RUNGUARD_DAEMON_LEASE_MS: '1000', RUNGUARD_DAEMON_HEARTBEAT_INTERVAL_MS: '600' }),
    ).toThrow(/"daemonLeaseMs" \(1000\) must be at least twice "daemonHeartbeatIntervalMs" \(600\)/);
  });

  it('when a flag is invalid, then the message names the option', () => {
    expect(() => loadConfig({}, { port: '-1' })).toThrow(/option --port must be an integer/);
  });
});

describe('migrations', () => {
  it('when three daemons migrate one empty database at once, then each migration is applied exactly once', async () => {
    const database = await createTestDatabase();
    cleanups.push(database.drop);
    const dbs = [0, 1, 2].map(() => postgresDb({ connectionString: database.url, max: 2 }));
    const applied = (await Promise.all(dbs.map((db) => migrate(db)))).flat().sort((a, b) => a - b);
    expect(await migrate(dbs[0]!)).toEqual([]);
    const { rows } = await dbs[0]!.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version');
    expect(rows.map((r) => r.version)).toEqual(applied);
    expect(applied.slice(0, 2)).toEqual([1, 2]);
    await Promise.all(dbs.map((db) => db.close()));
  });
});

describe('first start and the embedded database', () => {
  it(
    "when the database is empty, then its directory is its owner's alone (0700), and one workspace and key are created, saved 0600, and survive a restart",
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'rg-start-'));
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
      const first = await embeddedDb(join(dir, 'pgdata'));
      await migrate(first);
      const created = await bootstrapWorkspace(first, 'scale', dir);
      expect(created).not.toBeNull();
      const keyFile = await readFile(join(dir, 'api-key'), 'utf8');
      expect(keyFile.trim()).toBe(created!.apiKey);
      expect((await stat(join(dir, 'api-key'))).mode & 0o777).toBe(0o600);
      expect(await bootstrapWorkspace(first, 'scale', dir)).toBeNull(); // an existing database is left alone
      await first.close();
      expect((await stat(join(dir, 'pgdata'))).mode & 0o777).toBe(0o700);

      const second = await embeddedDb(join(dir, 'pgdata'));
      expect(await migrate(second)).toEqual([]);
      const principal = await new ApiKeyVerifier(second, 0).verify(created!.apiKey, new Date());
      expect(principal).toMatchObject({ workspaceId: created!.workspaceId, kind: 'key' });
      const { rows } = await second.query<{ plan: string }>('SELECT plan FROM workspaces');
      expect(rows).toEqual([{ plan: 'scale' }]);
      await second.close();
      // A real first start: the product's first hour must stay covered, whatever it costs here.
    },
    FIRST_START_TIMEOUT_MS,
  );

  // A fresh one's directory is checked by the first start above: a second initdb here would cost
  // as much again.
  it(
    "when an older embedded database, left readable by others, opens, then its directory is made its owner's alone (0700)",
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'rg-start-'));
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
      // A copy of the template, loosened.
      await copyEmbeddedTemplate(dir);
      await rename(join(dir, 'pgdata'), join(dir, 'older'));
      await chmod(join(dir, 'older'), 0o755);
      const older = await embeddedDb(join(dir, 'older'));
      await older.close();
      expect((await stat(join(dir, 'older'))).mode & 0o777).toBe(0o700);
    },
    FIRST_START_TIMEOUT_MS,
  );

  it('when the key file cannot be written, then no workspace is created: the next start creates it and keeps its key', async () => {
    const database = await createTestDatabase();
    cleanups.push(database.drop);
    const dir = await mkdtemp(join(tmpdir(), 'rg-start-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const db = postgresDb({ connectionString: database.url, max: 2 });
    cleanups.push(() => db.close());
    await migrate(db);
    await writeFile(join(dir, 'not-a-dir'), '');
    await expect(bootstrapWorkspace(db, 'scale', join(dir, 'not-a-dir', 'data'))).rejects.toThrow(/ENOTDIR/);
    expect((await db.query('SELECT count(*)::int AS n FROM workspaces')).rows).toEqual([{ n: 0 }]);

    const created = await bootstrapWorkspace(db, 'scale', join(dir, 'data'));
    expect(created).not.toBeNull();
    const kept = (await readFile(join(dir, 'data', 'api-key'), 'utf8')).trim();
    expect(kept).toBe(created!.apiKey);
    expect(await new ApiKeyVerifier(db, 0).verify(kept, new Date())).toMatchObject({
      workspaceId: created!.workspaceId,
    });
  });

  it('when a start fails after the embedded database opened, then its lock goes with it: the next start succeeds', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rg-start-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    // The bootstrap cannot write its key file: both names it may take are taken.
    await mkdir(join(dir, 'api-key'));
    await mkdir(join(dir, 'api-key.embedded'));
    // The migrated template, copied: this is about the lock, not about the initdb.
    await copyEmbeddedTemplate(dir);
    const config = loadConfig({ RUNGUARD_DATA_DIR: dir }, { port: '0' });
    await expect(startDaemon(config, createLogger('silent'), new PassThrough())).rejects.toThrow(
      /api-key and .*api-key\.embedded already hold other keys/,
    );
    await rm(join(dir, 'api-key'), { recursive: true });
    await rm(join(dir, 'api-key.embedded'), { recursive: true });
    await rm(join(dir, 'pgdata'), { recursive: true }); // a fresh database, so that it bootstraps again
    await copyEmbeddedTemplate(dir);
    const daemon = await startDaemon(config, createLogger('silent'), new PassThrough());
    await daemon.close();
  });
});
