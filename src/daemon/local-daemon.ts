/**
 * Where a running daemon can be found: once it listens, it writes its URL and key file to
 * `daemon.json` beside its key file in its data directory, to `daemons/<port>.json` there (so
 * several daemons sharing a directory are each found by their URL), and to a user-level record
 * (`$XDG_CONFIG_HOME/runguard/daemon.json`, else `~/.config/runguard/daemon.json`) naming that data
 * directory, so the CLI finds the last daemon started, its port and its key, from any folder. Each
 * file is removed when the daemon stops, if it still names that daemon.
 */
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

export interface DaemonRecord {
  url: string;
  /** Absolute: its data directory. */
  data_dir: string;
  /** Absolute: its key file (`api-key`, or `api-key.<database>`); absent from older daemons' records. */
  key_file?: string;
  pid: number;
  started_at: string;
}

export const DAEMON_RECORD_FILE = 'daemon.json';
/** Beside it, one record per daemon listening, by port. */
export const DAEMONS_DIR = 'daemons';

/** The per-port record of a daemon at `url` in `dataDir`. */
export function portRecordPath(dataDir: string, url: string): string {
  return join(dataDir, DAEMONS_DIR, `${new URL(url).port || '80'}.json`);
}

/** The per-port records of a data directory, the last started first. */
export function portRecords(dataDir: string): { file: string; record: DaemonRecord }[] {
  let names: string[];
  try {
    names = readdirSync(join(dataDir, DAEMONS_DIR)).filter((n) => n.endsWith('.json'));
  } catch {
    return [];
  }
  return names
    .map((name) => join(dataDir, DAEMONS_DIR, name))
    .flatMap((file) => {
      const record = readDaemonRecord(file);
      return record ? [{ file, record }] : [];
    })
    .sort((a, b) => (b.record.started_at ?? '').localeCompare(a.record.started_at ?? ''));
}

/** The user-level record's path, from the environment given (the CLI's or the daemon's). */
export function userRecordPath(env: NodeJS.ProcessEnv): string {
  const base = env.XDG_CONFIG_HOME?.trim() || join(env.HOME?.trim() || homedir(), '.config');
  return join(base, 'runguard', DAEMON_RECORD_FILE);
}

/** Reads a record; null when the file is missing or not a record (explained by the caller). */
export function readDaemonRecord(file: string): DaemonRecord | null {
  try {
    const value = JSON.parse(readFileSync(file, 'utf8')) as Partial<DaemonRecord>;
    if (typeof value.url === 'string' && typeof value.data_dir === 'string') return value as DaemonRecord;
  } catch {
    /* missing or unreadable: not a record */
  }
  return null;
}

function writeRecord(file: string, record: DaemonRecord): void {
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  // Written whole then renamed: a CLI reading it never sees half a record.
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, `${JSON.stringify(record, null, 2)}\n`, { mode: 0o600 });
  renameSync(temporary, file);
}

/**
 * Writes both records; returns a function that removes those still naming this process. A record
 * that cannot be written is reported, never fatal: the daemon serves without it.
 */
export function recordDaemon(
  record: DaemonRecord,
  env: NodeJS.ProcessEnv,
  warn: (file: string, error: Error) => void,
): () => void {
  const files = [
    join(record.data_dir, DAEMON_RECORD_FILE),
    portRecordPath(record.data_dir, record.url),
    userRecordPath(env),
  ];
  const written: string[] = [];
  for (const file of files) {
    try {
      writeRecord(file, record);
      written.push(file);
    } catch (error) {
      warn(file, error as Error);
    }
  }
  return () => {
    for (const file of written) {
      // Another daemon started since may have written its own: leave that one.
      if (readDaemonRecord(file)?.pid === record.pid) rmSync(file, { force: true });
    }
  };
}
