/**
 * First start: a daemon with an empty database creates a default workspace and its first API
 * key, shows the key once, and keeps it in `<data dir>/api-key` (mode 0600) for the CLI.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { lockForTransaction } from './store/advisory-locks.js';
import type { Db } from './store/db.js';
import { readShippedCatalog } from './money/shipped-catalog.js';
import { seedPricing } from './store/pricing-catalog.js';
import { anyWorkspaceExists, createApiKey, createWorkspace, type Plan } from './store/workspaces.js';

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
export async function bootstrapWorkspace(db: Db, plan: Plan, dataDir: string): Promise<Bootstrapped | null> {
  const keyFile = join(dataDir, 'api-key');
  const catalog = (await readShippedCatalog()).entries;
  return db.transaction(async (tx) => {
    await lockForTransaction(tx, 'bootstrap');
    if (await anyWorkspaceExists(tx)) return null;
    const workspace = await createWorkspace(tx, 'default', plan);
    const key = await createApiKey(tx, workspace.id, 'bootstrap');
    // Priced from the first call: without prices every budget would count $0.
    await seedPricing(tx, workspace.id, catalog, new Date());
    await mkdir(dataDir, { recursive: true });
    await writeFile(keyFile, `${key.apiKey}\n`, { mode: 0o600 });
    return { workspaceId: workspace.id, apiKey: key.apiKey, keyFile };
  });
}
