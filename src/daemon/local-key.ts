/**
 * The API key a local daemon keeps in its data directory (mode 0600): written at the first start,
 * read by the CLI and `runguard exec`, and the key the proxy guards header-less loopback calls
 * with. When the workspace's keys are regenerated through this daemon, the key kept here is
 * revoked with the others: the file and the daemon's copy then take the new key, or every local
 * tool would be locked out until someone edited the file and restarted the daemon.
 *
 * One file per database: `api-key` for the first database started with the directory, and
 * `api-key.<database>` for another one (two daemons in one checkout, e.g. the embedded database
 * and a Postgres): a first start never overwrites another database's key (see bootstrap.ts). A
 * daemon keeps the file whose key its own database issued.
 */
import { readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export const KEY_FILE = 'api-key';

/** The key files of a data directory: `api-key` first, then the other databases' (`api-key.<name>`). */
export async function keyFilesIn(dataDir: string): Promise<string[]> {
  const names = await readdir(dataDir).catch(() => [] as string[]);
  const others = names.filter((n) => n.startsWith(`${KEY_FILE}.`) && !n.endsWith('.tmp')).sort();
  return [KEY_FILE, ...others].map((name) => join(dataDir, name));
}

async function readKeyFile(path: string): Promise<string | null> {
  return readFile(path, 'utf8').then(
    (text) => text.trim() || null,
    () => null,
  );
}

/** `lg_<prefix>_<secret>`: the prefix names the key in the records. */
const prefixOf = (key: string): string | null => /^lg_([^_]+)_/.exec(key)?.[1] ?? null;

export class LocalKeyFile {
  /** Replacements one after another: two overlapping ones must not leave the first's key last. */
  private replacing: Promise<unknown> = Promise.resolve();

  private constructor(
    readonly path: string,
    private key: string | null,
  ) {}

  /**
   * The data directory's key file of this database, read now: the first whose key `issuedHere`
   * (its prefix is one of the database's keys). None: `api-key` with no key, so header-less calls
   * are refused rather than guarded with another database's key.
   */
  static async open(dataDir: string, issuedHere?: (prefix: string) => Promise<boolean>): Promise<LocalKeyFile> {
    const files = await keyFilesIn(dataDir);
    for (const path of files) {
      const key = await readKeyFile(path);
      if (key === null) continue;
      const prefix = prefixOf(key);
      if (!issuedHere || (prefix !== null && (await issuedHere(prefix)))) return new LocalKeyFile(path, key);
    }
    return new LocalKeyFile(files[0]!, null);
  }

  get current(): string | null {
    return this.key;
  }

  /** Keys were regenerated, revoking those of `revokedPrefixes`: if the one kept here was one, keep `issued`. */
  regenerated(revokedPrefixes: readonly string[], issued: string): Promise<boolean> {
    const done = this.replacing.then(() => this.replace(revokedPrefixes, issued));
    this.replacing = done.catch(() => {});
    return done;
  }

  private async replace(revokedPrefixes: readonly string[], issued: string): Promise<boolean> {
    const kept = this.key === null ? null : prefixOf(this.key);
    if (kept === null || !revokedPrefixes.includes(kept)) return false;
    // Written whole then renamed: a reader never sees half a key.
    const temporary = `${this.path}.${process.pid}.tmp`;
    await writeFile(temporary, `${issued}\n`, { mode: 0o600 });
    await rename(temporary, this.path);
    this.key = issued;
    return true;
  }
}
