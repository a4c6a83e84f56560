/**
 * Where the daemon is and which key to use, first found wins:
 *
 * - the URL: `--url`, RUNGUARD_URL, the `daemon.json` a running daemon wrote in its data
 *   directory (the data directory of its configuration, read as `runguard start` reads it:
 *   its default, RUNGUARD_CONFIG, RUNGUARD_DATA_DIR), the user-level record of the last
 *   daemon started (`~/.config/runguard/daemon.json`), then the configured port on loopback;
 * - the key: `--api-key`, RUNGUARD_API_KEY, then the key file of the daemon at that URL (its
 *   record names it: daemons sharing a data directory keep one each, see local-key.ts), else the
 *   `api-key` file of the configured data directory.
 *
 * Every place looked at is kept, so a failure can name them all and say where the key came from.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { isApiKeyFormat } from '../contract/api-key-format.js';
import { loadConfig, type Config } from '../config.js';
import {
  DAEMON_RECORD_FILE,
  portRecordPath,
  portRecords,
  readDaemonRecord,
  userRecordPath,
  type DaemonRecord,
} from '../daemon/local-daemon.js';
import { CliError } from './errors.js';

export interface ConnectionFlags {
  url?: string;
  apiKey?: string;
}

export interface Connection {
  url: string;
  apiKey: string;
  /** Where the key was read from, when it came from a daemon's key file. */
  keyFile?: string;
  /** Where the URL came from: `--url`, `RUNGUARD_URL`, a record's path, or the configured port. */
  urlSource: string;
  /** Where the key came from: `--api-key`, `RUNGUARD_API_KEY`, or a key file's path. */
  keySource: string;
  /** Every place looked at for the daemon, in order, with what was found there. */
  looked: string[];
  /** A key file the key given by flag or variable overrode, when it holds another key. */
  overriddenKeyFile?: string;
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
  const looked: string[] = [];
  const dataDir = resolve(daemonConfig(env, ['RUNGUARD_DATA_DIR']).dataDir);
  let record: DaemonRecord | null = null;
  let url: string;
  let urlSource: string;
  const given = flags.url ?? nonEmpty(env.RUNGUARD_URL);
  if (given) {
    urlSource = flags.url ? '--url' : 'RUNGUARD_URL';
    url = given;
  } else {
    looked.push('--url (not given)', 'RUNGUARD_URL (not set)');
    // The last daemon started with this directory; when it stopped, another still listening with it.
    const sharing = portRecords(dataDir)[0]?.file;
    const found = findRecord(
      [join(dataDir, DAEMON_RECORD_FILE), ...(sharing ? [sharing] : []), userRecordPath(env)],
      looked,
    );
    if (found) {
      [record, urlSource, url] = [found.record, found.file, found.record.url];
    } else {
      const config = daemonConfig(env, ['HOST', 'PORT']);
      url = localUrl(config);
      urlSource = `the configured port (${config.port}: the default, RUNGUARD_CONFIG or PORT)`;
      looked.push(`${url} (${urlSource})`);
    }
  }
  url = url.replace(/\/+$/, '');
  try {
    const parsed = new URL(url);
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error('not http');
  } catch {
    throw new CliError(`the daemon URL from ${urlSource} must be an http(s) URL (got ${JSON.stringify(url)}).`);
  }

  // A URL given or configured: the record of the daemon there, for its key file.
  record ??= recordAt(url, [portRecordPath(dataDir, url), join(dataDir, DAEMON_RECORD_FILE), userRecordPath(env)]);
  // The daemon found's own key file first: from another folder, the configured one is not its.
  const keyFiles = [
    ...new Set(
      [
        record?.key_file,
        ...[record?.data_dir, dataDir].filter((dir): dir is string => !!dir).map((dir) => join(dir, 'api-key')),
      ].filter((file): file is string => !!file),
    ),
  ];
  const base = { url, urlSource, looked };
  const givenKey = flags.apiKey ?? nonEmpty(env.RUNGUARD_API_KEY);
  if (givenKey !== undefined) {
    const keySource = flags.apiKey !== undefined ? '--api-key' : 'RUNGUARD_API_KEY';
    if (!isApiKeyFormat(givenKey)) {
      throw new CliError(
        `the API key from ${keySource} is not a runguard key (lg_<12 lowercase letters or digits>_<secret>).`,
      );
    }
    const other = keyFiles.find((file) => {
      const kept = readKey(file);
      return kept !== null && kept !== givenKey;
    });
    return { ...base, apiKey: givenKey, keySource, ...(other ? { overriddenKeyFile: other } : {}) };
  }
  for (const file of keyFiles) {
    const key = readKey(file);
    if (key !== null) return { ...base, apiKey: key, keyFile: file, keySource: file };
  }
  throw new CliError(
    `no API key: pass --api-key, set RUNGUARD_API_KEY, or run the CLI where the daemon keeps its key file ` +
      `(looked in ${keyFiles.join(' and ')}; set RUNGUARD_DATA_DIR to the daemon's data directory).`,
  );
}

function findRecord(files: string[], looked: string[]): { file: string; record: DaemonRecord } | null {
  for (const file of files) {
    const record = readDaemonRecord(file);
    looked.push(record ? `${file} (${record.url})` : `${file} (none)`);
    if (record) return { file, record };
  }
  return null;
}

/** The record, among `files`, of the daemon listening at `url` (same scheme, host and port). */
function recordAt(url: string, files: string[]): DaemonRecord | null {
  const origin = (address: string) => {
    try {
      return new URL(address).origin.replace('//localhost:', '//127.0.0.1:');
    } catch {
      return null;
    }
  };
  const wanted = origin(url);
  for (const file of files) {
    const record = readDaemonRecord(file);
    if (record && origin(record.url) === wanted) return record;
  }
  return null;
}

/** The local daemon's URL: its port, on loopback when it listens on every address. */
function localUrl(config: Config): string {
  const host = ['', '0.0.0.0', '::'].includes(config.host) ? '127.0.0.1' : config.host;
  return `http://${host.includes(':') ? `[${host}]` : host}:${config.port}`;
}

function readKey(file: string): string | null {
  try {
    return readFileSync(file, 'utf8').trim() || null;
  } catch {
    return null;
  }
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value.trim();
}
