/**
 * Where the daemon is and which key to use: `--url` / `--api-key`, then RUNGUARD_URL /
 * RUNGUARD_API_KEY, then the local daemon as its own configuration places it (the port and the
 * data directory of config/default.json, RUNGUARD_CONFIG, PORT and RUNGUARD_DATA_DIR, read as
 * `runguard start` reads them), with the key file the daemon wrote on its first start.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { loadConfig, type Config } from '../config.js';
import { CliError } from './errors.js';

export interface ConnectionFlags {
  url?: string;
  apiKey?: string;
}

export interface Connection {
  url: string;
  apiKey: string;
  /** Where the key was read from, when it came from the local daemon's key file. */
  keyFile?: string;
}

/**
 * The daemon's configuration as `start` reads it, from the file and only the variables named: the
 * CLI needs its address or its data directory, and a variable it does not need (a DATABASE_URL of
 * another program) must not fail it.
 */
function daemonConfig(env: NodeJS.ProcessEnv, names: readonly string[]): Config {
  const relevant: NodeJS.ProcessEnv = { RUNGUARD_CONFIG: env.RUNGUARD_CONFIG };
  for (const name of names) relevant[name] = env[name];
  return loadConfig(relevant);
}

export function resolveConnection(flags: ConnectionFlags, env: NodeJS.ProcessEnv): Connection {
  const url = (flags.url ?? nonEmpty(env.RUNGUARD_URL) ?? localUrl(daemonConfig(env, ['HOST', 'PORT']))).replace(/\/+$/, '');
  try {
    const parsed = new URL(url);
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error('not http');
  } catch {
    throw new CliError(`--url must be an http(s) URL (got ${JSON.stringify(url)}).`);
  }
  const given = flags.apiKey ?? nonEmpty(env.RUNGUARD_API_KEY);
  if (given) return { url, apiKey: given };
  const keyFile = join(resolve(daemonConfig(env, ['RUNGUARD_DATA_DIR']).dataDir), 'api-key');
  return { url, apiKey: readKeyFile(keyFile), keyFile };
}

/** The local daemon's URL: its port, on loopback when it listens on every address. */
function localUrl(config: Config): string {
  const host = ['', '0.0.0.0', '::'].includes(config.host) ? '127.0.0.1' : config.host;
  return `http://${host.includes(':') ? `[${host}]` : host}:${config.port}`;
}

function readKeyFile(file: string): string {
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
