/**
 * The migrated Postgres database that test stores on Postgres are created from (`CREATE DATABASE
 * ... TEMPLATE`), as embedded ones are copied from embedded-template.ts: every migration on an
 * empty database costs about a second of a busy machine, paid twice by most test files (one store
 * per Postgres backend). Built once by the global setup and kept, under a name that changes with
 * the migrations, so a changed schema is never served stale; the global setup drops the templates
 * of other migrations that no run is using (`dropStaleTemplates`).
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { postgresDb } from '../../src/store/db.js';
import { migrate } from '../../src/store/migrations.js';
import { admin, ADMIN_DATABASE_URL, createTestDatabase } from './services.js';

const TEMPLATE_PREFIX = 'rg_template_';

async function templateName(): Promise<string> {
  const migrations = await readFile(new URL('../../src/store/migrations.ts', import.meta.url));
  return `${TEMPLATE_PREFIX}${createHash('sha256').update(migrations).digest('hex').slice(0, 16)}`;
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

/** The advisory lock (on the admin database) that says a run uses a template: shared by the runs using it. */
const USE_LOCK = 'SELECT pg_advisory_lock_shared(hashtextextended($1, 0))';
const TRY_DROP_LOCK = 'SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS free';

export interface TemplateInUse {
  name: string;
  /** The run is over: the template may be dropped once its migrations are stale. */
  release(): Promise<void>;
}

/**
 * The template for these migrations, marked as in use by this run until `release()`: a session
 * of its own holds a shared lock on its name, which `dropStaleTemplates` of a run at other
 * migrations (another checkout's, or this one's after a new migration) never drops it under.
 * Taken before the template is looked for: a drop under way finishes first, and it is built again.
 */
export async function usePostgresTemplate(): Promise<TemplateInUse> {
  const name = await templateName();
  const session = new pg.Client({ connectionString: ADMIN_DATABASE_URL, connectionTimeoutMillis: 5_000 });
  await session.connect();
  try {
    await session.query(USE_LOCK, [name]);
    await ensurePostgresTemplate();
  } catch (error) {
    await session.end();
    throw error;
  }
  return { name, release: () => session.end() };
}

/**
 * Drops the templates of other migrations, except those a run holds (`usePostgresTemplate`):
 * each under the exclusive lock on its name, taken without waiting. Answers the names dropped.
 */
export async function dropStaleTemplates(current: string): Promise<string[]> {
  const stale = await admin((c) =>
    c.query<{ datname: string }>('SELECT datname FROM pg_database WHERE starts_with(datname, $1) AND datname <> $2', [
      TEMPLATE_PREFIX,
      current,
    ]),
  );
  const dropped: string[] = [];
  for (const { datname } of stale.rows) {
    // Names come from pg_database, and only ours (prefix and hex): safe to quote as identifiers.
    if (!/^rg_template_[0-9a-f]+$/.test(datname)) continue;
    await admin(async (c) => {
      if (!(await c.query<{ free: boolean }>(TRY_DROP_LOCK, [datname])).rows[0]!.free) return; // a run uses it
      try {
        await c.query(`DROP DATABASE IF EXISTS ${datname}`);
        dropped.push(datname);
      } catch (error) {
        // Someone is connected to it after all (a copy being made by a run from before the lock).
        if ((error as { code?: string }).code !== '55006') throw error;
      }
    }); // The session's end releases the lock.
  }
  return dropped;
}
