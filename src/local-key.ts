/**
 * The API key a local daemon keeps in `<data dir>/api-key` (mode 0600): written at the first start,
 * read by the CLI and `runguard exec`, and the key the proxy guards header-less loopback calls
 * with. When the workspace's keys are regenerated through this daemon, the key kept here is
 * revoked with the others: the file and the daemon's copy then take the new key, or every local
 * tool would be locked out until someone edited the file and restarted the daemon.
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** `lg_<prefix>_<secret>`: the prefix names the key in the records. */
const prefixOf = (key: string): string | null => /^lg_([^_]+)_/.exec(key)?.[1] ?? null;

export class LocalKeyFile {
  /** Replacements one after another: two overlapping ones must not leave the first's key last. */
  private replacing: Promise<unknown> = Promise.resolve();

  private constructor(
    readonly path: string,
    private key: string | null,
  ) {}

  /** The data directory's key file, read now (none yet: null until the first start writes it). */
  static async open(dataDir: string): Promise<LocalKeyFile> {
    const path = join(dataDir, 'api-key');
    const key = await readFile(path, 'utf8').then(
      (text) => text.trim() || null,
      () => null,
    );
    return new LocalKeyFile(path, key);
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
