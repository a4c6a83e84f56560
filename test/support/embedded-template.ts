/**
 * The migrated embedded database that every embedded test store starts from, as a copy. A fresh
 * PGlite data directory costs an initdb in WebAssembly, and then every migration: tens of seconds
 * of CPU on a busy two-core machine, paid by each file that opens one (issue #33). A directory
 * copy and a start of an existing cluster cost a few seconds. The template is built once, outside
 * any test's or hook's timeout (by the global setup), and kept across runs under a name that
 * changes with the migrations and the PGlite version, so a changed schema is never served stale.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rename, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { embeddedDb } from '../../src/store/db.js';
import { migrate } from '../../src/store/migrations.js';

/** What the template's contents follow from: the migrations' source and the engine that ran them. */
async function templateKey(): Promise<string> {
  const migrations = await readFile(new URL('../../src/store/migrations.ts', import.meta.url));
  // Its exports map hides package.json from require: read where npm installs it.
  const pglite = await readFile(new URL('../../node_modules/@electric-sql/pglite/package.json', import.meta.url));
  return createHash('sha256').update(pglite).update(migrations).digest('hex').slice(0, 16);
}

const exists = (path: string) =>
  stat(path).then(
    () => true,
    () => false,
  );

/**
 * The template's directory, built first when there is none for this key. Built beside it and
 * renamed into place once closed, so a copy never reads a half-built one; two runs that build at
 * once both succeed, and the second's is dropped.
 */
export async function ensureEmbeddedTemplate(): Promise<string> {
  const template = join(tmpdir(), `runguard-embedded-template-${await templateKey()}`);
  if (await exists(template)) return template;
  const building = await mkdtemp(`${template}.building-`);
  const dataDir = join(building, 'pgdata');
  try {
    const db = await embeddedDb(dataDir);
    try {
      await migrate(db);
    } finally {
      await db.close();
    }
    await rename(dataDir, template).catch(async (error: NodeJS.ErrnoException) => {
      if (!(await exists(template))) throw error;
    });
  } finally {
    await rm(building, { recursive: true, force: true });
  }
  return template;
}
