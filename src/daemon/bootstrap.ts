/**
 * First start: a daemon with an empty database creates a default workspace and its first API
 * key, shows the key once, and keeps it in `<data dir>/api-key` (mode 0600) for the CLI.
 */
import type { PlanName } from '../contract/usage.js';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { KEY_FILE } from './local-key.js';
import { lockForTransaction } from '../store/advisory-locks.js';
import type { Db } from '../store/db.js';
import { readShippedCatalog } from '../money/shipped-catalog.js';
import { seedPricing } from '../store/pricing-catalog.js';
import { anyWorkspaceExists, createApiKey, createWorkspace } from '../store/workspaces.js';

export interface Bootstrapped {
  workspaceId: string;
  apiKey: string;
  keyFile: string;
}

/**
 * Null when the database already has a workspace (another daemon, or an earlier start). The key
 * file is written before the workspace commits: a file that cannot be written (a data directory
 * the user cannot write) fails the start with nothing created, so the next start creates the
 * workspace again, rather than finding one whose only key was never shown or kept.
 */
export async function bootstrapWorkspace(
  db: Db,
  plan: PlanName,
  dataDir: string,
  databaseName = 'embedded',
): Promise<Bootstrapped | null> {
  const catalog = (await readShippedCatalog()).entries;
  return db.transaction(async (tx) => {
    await lockForTransaction(tx, 'bootstrap');
    if (await anyWorkspaceExists(tx)) return null;
    const workspace = await createWorkspace(tx, 'default', plan);
    const key = await createApiKey(tx, workspace.id, 'bootstrap');
    // Priced from the first call: without prices every budget would count $0.
    await seedPricing(tx, workspace.id, catalog, new Date());
    await mkdir(dataDir, { recursive: true });
    const keyFile = await writeNewKeyFile(dataDir, databaseName, key.apiKey);
    return { workspaceId: workspace.id, apiKey: key.apiKey, keyFile };
  });
}

/**
 * Writes the key to a file that did not exist: `api-key`, else (another database's key is there)
 * `api-key.<database>`. Never overwrites: the other daemon's CLI would be locked out. Both taken
 * (a database recreated under the same name): the start fails, naming them.
 */
async function writeNewKeyFile(dataDir: string, databaseName: string, apiKey: string): Promise<string> {
  const label = databaseName.replace(/[^A-Za-z0-9_-]+/g, '_') || 'database';
  const files = [join(dataDir, KEY_FILE), join(dataDir, `${KEY_FILE}.${label}`)];
  for (const file of files) {
    try {
      await writeFile(file, `${apiKey}\n`, { mode: 0o600, flag: 'wx' });
      return file;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
  }
  throw new Error(
    `cannot keep the new workspace's API key: ${files.join(' and ')} already hold other keys. ` +
      'Remove the one of a database that no longer exists, or give this daemon a data directory of its own (RUNGUARD_DATA_DIR).',
  );
}
