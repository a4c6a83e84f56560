/**
 * One spawned daemon for a file of CLI tests, as a user's machine has it: started on a Postgres
 * database of its own before the file's tests, stopped after them. The tests run `runguard` against
 * it and check the outcome through the API with the daemon's bootstrap key.
 */
import { afterAll, beforeAll } from 'vitest';
import { caller, type Caller } from './harness.js';
import { runCli, spawnDaemonOnPostgres, type CliResult } from './daemon.js';

export interface CliDaemon {
  /** The daemon; set once the file's `beforeAll` ran. */
  daemon: Awaited<ReturnType<typeof spawnDaemonOnPostgres>>;
  /** The API, with the daemon's bootstrap key. */
  api: Caller;
  /** What points the CLI at the daemon: its URL and data dir (where its key file is). */
  env: Record<string, string>;
  /** Runs `runguard <args>` against the daemon. */
  cli(...args: string[]): Promise<CliResult>;
}

/** Registers the file's `beforeAll` and `afterAll`; the fields are filled in when the first runs. */
export function useCliDaemon(): CliDaemon {
  const fixture = { cli: (...args: string[]) => runCli(args, fixture.env) } as CliDaemon;
  beforeAll(async () => {
    fixture.daemon = await spawnDaemonOnPostgres();
    fixture.api = caller(fixture.daemon.url, fixture.daemon.apiKey);
    fixture.env = { RUNGUARD_URL: fixture.daemon.url, RUNGUARD_DATA_DIR: fixture.daemon.dataDir };
  });
  afterAll(async () => {
    await fixture.daemon?.close();
  });
  return fixture;
}
