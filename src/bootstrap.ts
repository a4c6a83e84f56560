/**
 * First start: a daemon with an empty database creates a default workspace and its first API
 * key, shows the key once, and keeps it in `<data dir>/api-key` (mode 0600) for the CLI.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ADVISORY_LOCKS } from './store/advisory-locks.js';
import type { Db } from './store/db.js';
import { createApiKey, createWorkspace, type Plan } from './store/workspaces.js';

export interface Bootstrapped {
  workspaceId: string;
  apiKey: string;
  keyFile: string;
}

/** Null when the database already has a workspace (another daemon, or an earlier start). */
export async function bootstrapWorkspace(db: Db, plan: Plan, dataDir: string): Promise<Bootstrapped | null> {
  const created = await db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [ADVISORY_LOCKS.bootstrap]);
    const { rows } = await tx.query('SELECT 1 FROM workspaces LIMIT 1');
    if (rows.length > 0) return null;
    const workspace = await createWorkspace(tx, 'default', plan);
    const key = await createApiKey(tx, workspace.id, 'bootstrap');
    return { workspaceId: workspace.id, apiKey: key.apiKey };
  });
  if (!created) return null;
  await mkdir(dataDir, { recursive: true });
  const keyFile = join(dataDir, 'api-key');
  await writeFile(keyFile, `${created.apiKey}\n`, { mode: 0o600 });
  return { ...created, keyFile };
}
