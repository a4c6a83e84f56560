/**
 * Where the daemon is and which key to use: `--url` / `--api-key`, then RUNGUARD_URL /
 * RUNGUARD_API_KEY, then the local daemon (http://127.0.0.1:8787 and `<data dir>/api-key`,
 * the key file the daemon wrote on its first start; data dir: RUNGUARD_DATA_DIR or ./.runguard).
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { CliError } from './errors.js';

export const DEFAULT_URL = 'http://127.0.0.1:8787';
export const DEFAULT_DATA_DIR = '.runguard';

export interface ConnectionFlags {
  url?: string;
  apiKey?: string;
}

export interface Connection {
  url: string;
  apiKey: string;
}

export function resolveConnection(flags: ConnectionFlags, env: NodeJS.ProcessEnv): Connection {
  const url = flags.url ?? nonEmpty(env.RUNGUARD_URL) ?? DEFAULT_URL;
  try {
    const parsed = new URL(url);
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error('not http');
  } catch {
    throw new CliError(`--url must be an http(s) URL (got ${JSON.stringify(url)}).`);
  }
  const apiKey = flags.apiKey ?? nonEmpty(env.RUNGUARD_API_KEY) ?? readKeyFile(env);
  return { url, apiKey };
}

function readKeyFile(env: NodeJS.ProcessEnv): string {
  const file = join(resolve(nonEmpty(env.RUNGUARD_DATA_DIR) ?? DEFAULT_DATA_DIR), 'api-key');
  try {
    const key = readFileSync(file, 'utf8').trim();
    if (key) return key;
  } catch {
    /* explained below */
  }
  throw new CliError(
    `no API key: pass --api-key, set RUNGUARD_API_KEY, or run the CLI where the daemon keeps ${file} ` +
      '(set RUNGUARD_DATA_DIR to its data directory).',
  );
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}
