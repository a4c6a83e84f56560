/**
 * `runguard reconcile` never migrates: run as a user runs it (bin/runguard, which loads dist/:
 * build first), against a real database whose schema is behind or ahead of this runguard's, it
 * refuses with exit 1 and leaves the schema as it found it; on a current schema it reconciles.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { embeddedDb, postgresDb, type Db } from '../../src/store/db.js';
import { migrate } from '../../src/store/migrations.js';
import { runCli } from '../support/daemon.js';
import { copyEmbeddedTemplate } from '../support/embedded-data-dir.js';
import { createTestDatabase } from '../support/services.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** A fully migrated Postgres database of its own: its URL, a pool on it, and the version this runguard expects. */
async function migratedPostgres(): Promise<{
  url: string;
  db: Db;
  expected: number;
  previous: number;
  applied: number[];
}> {
  // A copy of the migrated template (postgres-template.ts), brought up to date as a daemon would.
  const database = await createTestDatabase({ template: inject('postgresTemplate') });
  cleanups.push(database.drop);
  const db = postgresDb({ connectionString: database.url, max: 2 });
  cleanups.push(() => db.close().catch(() => {}));
  await migrate(db);
  const applied = (await migrations(db)).map((m) => m.version);
  // Versions may have gaps (each change takes the number it was given): the one before the last is not last - 1.
  const expected = Math.max(...applied);
  return { url: database.url, db, expected, previous: Math.max(...applied.filter((v) => v !== expected)), applied };
}

async function migrations(db: Db): Promise<{ version: number; name: string; applied_at: string }[]> {
  const { rows } = await db.query<{ version: number; name: string; applied_at: string }>(
    'SELECT version, name, applied_at::text FROM schema_migrations ORDER BY version',
  );
  return rows;
}

describe('reconcile and the schema version', () => {
  it('when the last migration is not recorded, then reconcile (--dry-run or not) refuses and leaves schema_migrations as it was', async () => {
    const { url, db, expected, previous, applied } = await migratedPostgres();
    await db.query('DELETE FROM schema_migrations WHERE version = $1', [expected]);
    const before = await migrations(db);
    expect(before.map((m) => m.version)).toEqual(applied.filter((v) => v !== expected));

    // At once: a command that migrated would leave schema_migrations changed for the check after all.
    const commands = [['reconcile', '--dry-run'], ['reconcile', '--dry-run', '--json'], ['reconcile']];
    const results = await Promise.all(commands.map((args) => runCli(args, { DATABASE_URL: url })));
    for (const [i, result] of results.entries()) {
      expect(result.code, commands[i]!.join(' ')).toBe(1);
      expect(result.stderr).toBe(
        `runguard: the database schema is at version ${previous}, this runguard expects ${expected}: run \`npx runguard migrate\` first\n`,
      );
      expect(result.stdout).toBe('');
    }
    expect(await migrations(db)).toEqual(before);
  });

  it('when a newer runguard migrated the schema, then reconcile refuses it too and changes nothing', async () => {
    const { url, db, expected } = await migratedPostgres();
    await db.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
      expected + 1,
      'from_a_newer_runguard',
    ]);
    const before = await migrations(db);

    const commands = [['reconcile', '--dry-run'], ['reconcile']];
    const results = await Promise.all(commands.map((args) => runCli(args, { DATABASE_URL: url })));
    for (const [i, result] of results.entries()) {
      expect(result.code, commands[i]!.join(' ')).toBe(1);
      expect(result.stderr).toMatch(
        new RegExp(
          `^runguard: the database schema is at version ${expected + 1}, newer than this runguard's ${expected} `,
        ),
      );
      expect(result.stdout).toBe('');
    }
    expect(await migrations(db)).toEqual(before);
  });

  it('when the schema is current, then reconcile --dry-run runs and reports', async () => {
    const { url, db } = await migratedPostgres();
    const before = await migrations(db);
    const result = await runCli(['reconcile', '--dry-run'], { DATABASE_URL: url });
    expect(result).toMatchObject({ code: 0, stdout: expect.stringContaining('No drift') });
    expect(await migrations(db)).toEqual(before);
  });

  it('when the embedded database lacks its last migration, then reconcile --dry-run refuses without applying it', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'rg-reconcile-schema-'));
    cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
    // The migrated template, copied: an initdb here would cost tens of seconds on a busy machine.
    await copyEmbeddedTemplate(dataDir);
    const db = await embeddedDb(join(dataDir, 'pgdata'));
    let before: Awaited<ReturnType<typeof migrations>>;
    try {
      await migrate(db);
      // Migration 8 undone as well as unrecorded: a reconcile that migrated would redo it.
      await db.exec(`
        DROP TRIGGER run_counts_insert ON runs; DROP TRIGGER run_counts_update ON runs;
        DROP TRIGGER run_counts_delete ON runs; DROP TRIGGER run_counts_truncate ON runs;
        DROP FUNCTION run_counts_raise(); DROP TABLE run_counts;
        DELETE FROM schema_migrations WHERE version = 8;`);
      before = await migrations(db);
    } finally {
      await db.close();
    }

    const result = await runCli(['reconcile', '--dry-run'], { RUNGUARD_DATA_DIR: dataDir });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /^runguard: the database schema is at version 7, this runguard expects \d+: run `npx runguard migrate` first\n$/,
    );
    expect(before.map((m) => m.version)).toEqual(expect.arrayContaining([1, 2, 3, 4, 5, 6, 7]));
    expect(before.map((m) => m.version)).not.toContain(8);

    const after = await embeddedDb(join(dataDir, 'pgdata'));
    try {
      expect(await migrations(after)).toEqual(before);
      const { rows } = await after.query<{ exists: boolean }>("SELECT to_regclass('run_counts') IS NOT NULL AS exists");
      expect(rows[0]!.exists).toBe(false);
    } finally {
      await after.close();
    }
  });
});
