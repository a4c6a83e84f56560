/**
 * The migrated Postgres database that test stores on Postgres are created from (`CREATE DATABASE
 * ... TEMPLATE`), as embedded ones are copied from embedded-template.ts: every migration on an
 * empty database costs about a second of a busy machine, paid twice by most test files (one store
 * per Postgres backend). Built once by the global setup and kept, under a name that changes with
 * the migrations, so a changed schema is never served stale.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { postgresDb } from '../../src/store/db.js';
import { migrate } from '../../src/store/migrations.js';
import { admin, createTestDatabase } from './services.js';

async function templateName(): Promise<string> {
  const migrations = await readFile(new URL('../../src/store/migrations.ts', import.meta.url));
  return `rg_template_${createHash('sha256').update(migrations).digest('hex').slice(0, 16)}`;
}

const exists = (name: string) =>
  admin((c) => c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).then((r) => r.rowCount === 1);

/**
 * The template's name, built first when there is none for these migrations: migrated under a
 * name of its own, then renamed into place, so a copy never starts from a half-built one; two
 * runs that build at once both succeed, and the second's is dropped. Nothing connects to it after.
 */
export async function ensurePostgresTemplate(): Promise<string> {
  const name = await templateName();
  if (await exists(name)) return name;
  const building = await createTestDatabase();
  try {
    const db = postgresDb({ connectionString: building.url, max: 1 });
    try {
      await migrate(db);
    } finally {
      await db.close();
    }
    // The closed connection's server process may still be on its way out: renaming waits for it.
    for (let attempt = 0; ; attempt++) {
      try {
        await admin((c) => c.query(`ALTER DATABASE ${building.name} RENAME TO ${name}`));
        return name;
      } catch (error) {
        const code = (error as { code?: string }).code;
        if (code === '42P04' && (await exists(name))) return name; // another run built it first
        if (code !== '55006' || attempt >= 50) throw error;
        await sleep(100);
      }
    }
  } finally {
    await building.drop();
  }
}
