/**
 * Indexes built after the migrations, without holding writes. `CREATE INDEX` inside the
 * migrations' transaction would hold every daemon's step writes for as long as it reads the
 * table; `CREATE INDEX CONCURRENTLY` does not, but may not run in a transaction. So on Postgres a
 * daemon builds them in the background, on a connection of its own, while it serves; until they
 * are built, what they serve (the periodic reconcile) reads the table instead, more slowly.
 */
import pg from 'pg';
import type { Logger } from 'pino';
import type { Db } from './db.js';

interface LateIndex {
  name: string;
  /** What follows `CREATE INDEX <name>`. */
  definition: string;
}

export const LATE_INDEXES: readonly LateIndex[] = [
  // The reconcile recounts the last days' spend from the steps finished in them: without this it
  // reads every step ever recorded (~0.2-0.5 s at a million, growing with history). Partial: a
  // step without a cost is never counted, and never costs an entry.
  { name: 'steps_priced_finish', definition: 'ON steps (finished_at) WHERE cost_usd IS NOT NULL' },
];

/** Daemons starting together: one builds, the others go on without waiting. */
const BUILD_LOCK = 7_318_842_002;

export interface LateIndexBuild {
  /** Resolves when the build has ended: built, found built, left to another daemon, or failed (logged). */
  readonly done: Promise<void>;
  /** Stops a build in progress (an index cut short is dropped and built again next time) and waits for it. */
  stop(): Promise<void>;
}

/** The embedded database is one process's: its indexes are built at once, in the open. */
export async function buildLateIndexesNow(db: Db): Promise<void> {
  for (const index of LATE_INDEXES) await db.exec(`CREATE INDEX IF NOT EXISTS ${index.name} ${index.definition}`);
}

/** Starts building the late indexes on Postgres at `connectionString`, in the background. */
export function buildLateIndexes(connectionString: string, logger?: Logger): LateIndexBuild {
  // Not the pool's: its statement timeout would cut a long build, and a session lock needs a
  // connection that stays the same.
  const client = new pg.Client({ connectionString, application_name: 'runguard-indexes' });
  client.on('error', () => {}); // the statement in progress fails instead
  let stopping = false;
  let finished = false;
  const run = async () => {
    await client.connect();
    await client.query('SET statement_timeout = 0');
    const { rows } = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [BUILD_LOCK]);
    if (!rows[0]?.locked) return;
    for (const index of LATE_INDEXES) {
      if (stopping) return;
      const { rows: found } = await client.query<{ valid: boolean }>(
        `SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
         WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace`,
        [index.name],
      );
      if (found[0]?.valid) continue;
      // A concurrent build cut short (a stop, a crash) leaves its index invalid: never used, but
      // still written to. It is dropped and built again.
      if (found[0]) await client.query(`DROP INDEX CONCURRENTLY IF EXISTS ${index.name}`);
      const started = performance.now();
      await client.query(`CREATE INDEX CONCURRENTLY ${index.name} ${index.definition}`);
      logger?.info({ index: index.name, ms: Math.round(performance.now() - started) }, 'index built');
    }
  };
  const done = run()
    .catch((error: unknown) => {
      if (!stopping) logger?.warn({ err: error }, 'building an index failed: the reconcile reads without it until the next start');
    })
    .finally(() => {
      finished = true;
      return client.end().catch(() => {});
    });
  return {
    done,
    async stop() {
      stopping = true;
      // Postgres does not see a client leave in the middle of a statement: the build is cancelled.
      const pid = (client as unknown as { processID?: number }).processID;
      if (pid && !finished) {
        const canceller = new pg.Client({ connectionString, connectionTimeoutMillis: 5_000 });
        canceller.on('error', () => {});
        await canceller.connect().then(() => canceller.query('SELECT pg_cancel_backend($1)', [pid])).catch(() => {});
        await canceller.end().catch(() => {});
      }
      await done;
    },
  };
}
