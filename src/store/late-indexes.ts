/**
 * Indexes built after the migrations, without holding writes. `CREATE INDEX` inside the
 * migrations' transaction would hold every daemon's step writes for as long as it reads the
 * table; `CREATE INDEX CONCURRENTLY` does not, but may not run in a transaction. So on Postgres a
 * daemon builds them in the background, on a connection of its own, while it serves; until they
 * are built, what they serve (the periodic reconcile) reads the table instead, more slowly.
 */
import pg from 'pg';
import type { Logger } from 'pino';
import { ADVISORY_LOCKS } from './advisory-locks.js';
import type { Db } from './db.js';

interface LateIndex {
  name: string;
  table: string;
  /** What follows `CREATE INDEX <name> ON <table>`. */
  definition: string;
}

export const LATE_INDEXES: readonly LateIndex[] = [
  // The reconcile recounts the last days' spend from the steps finished in them: without this it
  // reads every step ever recorded (~0.2-0.5 s at a million, growing with history). Partial: a
  // step without a cost is never counted, and never costs an entry.
  { name: 'steps_priced_finish', table: 'steps', definition: '(finished_at) WHERE cost_usd IS NOT NULL' },
  // The webhook scans (webhooks/scans.ts): today's per-user spend for budget thresholds, the denials
  // of a window, the runs failed since the last scan. Partial: only denials and failures cost an entry.
  { name: 'user_usage_daily_day', table: 'user_usage_daily', definition: '(day)' },
  { name: 'steps_blocked', table: 'steps', definition: "(created_at) WHERE status = 'BLOCKED'" },
  { name: 'runs_blocked', table: 'runs', definition: "(started_at) WHERE status = 'BLOCKED'" },
  { name: 'runs_failed', table: 'runs', definition: "(ended_at) WHERE status = 'FAILED'" },
  // Unfinished steps with an estimate (migration 15) are the calls in flight: a workspace's outstanding
  // reservations are summed from them, and a Redis copy of them is rebuilt from them.
  {
    name: 'steps_outstanding_estimates',
    table: 'steps',
    definition: "(workspace_id, run_id) WHERE status = 'ALLOWED' AND estimate_micros IS NOT NULL",
  },
  // Crash recovery (result-recovery.ts): a dead daemon's unfinished proxied steps, and the RUNNING
  // runs it started for calls of their own. Partial: an entry lives only while its call is in
  // flight (a finish moves the row out), so each stays about as small as the calls in flight.
  {
    name: 'steps_in_flight_by_daemon',
    table: 'steps',
    definition: "(daemon_id) WHERE status = 'ALLOWED' AND daemon_id IS NOT NULL",
  },
  {
    name: 'runs_running_by_daemon',
    table: 'runs',
    definition: "(daemon_id) WHERE status = 'RUNNING' AND daemon_id IS NOT NULL",
  },
  // The runs carrying given tags (GET /v1/runs?tag=k:v, a containment test). Partial: an untagged
  // run costs no entry.
  { name: 'runs_tagged', table: 'runs', definition: "USING gin (tags jsonb_path_ops) WHERE tags <> '{}'" },
];

export interface LateIndexBuild {
  /**
   * Resolves when the build has ended: built, found built, left to the daemon that holds the
   * lock, stopped, or failed (logged). An index left invalid is built again at the next start.
   */
  readonly done: Promise<void>;
  /** Cancels a build in progress, and waits for it to end (at most a few seconds). */
  stop(): Promise<void>;
}

/** The embedded database is one process's: its indexes are built at once, in the open. */
export async function buildLateIndexesNow(db: Db): Promise<void> {
  for (const index of LATE_INDEXES)
    await db.exec(`CREATE INDEX IF NOT EXISTS ${index.name} ON ${index.table} ${index.definition}`);
}

class Stopped extends Error {}

type Query = <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) => Promise<R[]>;

/** Builds each late index that is missing or invalid, one at a time, without blocking writes. */
async function buildMissing(query: Query, logger?: Logger): Promise<void> {
  for (const index of LATE_INDEXES) {
    // The index as `CREATE ... ON <table>` would name it: in the table's schema, by search_path.
    const [found] = await query<{ valid: boolean }>(
      `SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
       WHERE c.relname = $1 AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass($2))`,
      [index.name, index.table],
    );
    if (found?.valid) continue;
    // A concurrent build cut short (a stop, a crash) leaves its index invalid: never used, but
    // still written to. It is dropped and built again.
    if (found) await query(`DROP INDEX CONCURRENTLY IF EXISTS ${index.name}`);
    const started = performance.now();
    await query(`CREATE INDEX CONCURRENTLY ${index.name} ON ${index.table} ${index.definition}`);
    logger?.info({ index: index.name, ms: Math.round(performance.now() - started) }, 'index built');
  }
}

/** Postgres does not see a client leave in the middle of a statement: the build is cancelled. */
async function cancelBackend(connectionString: string, pid: number): Promise<void> {
  const canceller = new pg.Client({ connectionString, connectionTimeoutMillis: 2_000 });
  canceller.on('error', () => {});
  try {
    await canceller.connect();
    await canceller.query('SELECT pg_cancel_backend($1)', [pid]);
  } catch {
    // Postgres unreachable: the deadline in `stop` ends the wait
  } finally {
    await canceller.end().catch(() => {});
  }
}

/** Starts building the late indexes on Postgres at `connectionString`, in the background. */
export function buildLateIndexes(connectionString: string, logger?: Logger): LateIndexBuild {
  // Not the pool's: its statement timeout would cut a long build, and a session lock needs a
  // connection that stays the same.
  const client = new pg.Client({
    connectionString,
    application_name: 'runguard-indexes',
    connectionTimeoutMillis: 10_000,
    keepAlive: true,
  });
  client.on('error', () => {}); // the statement in progress fails instead
  let stopping = false;
  let backendPid: number | null = null;
  const query = async <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) => {
    if (stopping) throw new Stopped();
    return (await client.query<R>(sql, params)).rows;
  };
  const run = async () => {
    await client.connect();
    backendPid = (await query<{ pid: number }>('SELECT pg_backend_pid() AS pid'))[0]!.pid;
    // A build waits for the transactions that write to the table; no timeout set on the role or
    // database may cut it (it would leave an invalid index, and again at every start).
    await query('SET statement_timeout = 0');
    await query('SET lock_timeout = 0');
    const [lock] = await query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [
      ADVISORY_LOCKS.lateIndexes,
    ]);
    if (!lock?.locked) return;
    await buildMissing(query, logger);
  };
  const done = run()
    .catch((error: unknown) => {
      if (!stopping)
        logger?.warn({ err: error }, 'building an index failed: the reconcile reads without it until the next start');
    })
    .finally(() => client.end().catch(() => {}));
  let settled = false;
  void done.then(() => (settled = true));

  return {
    done,
    async stop() {
      stopping = true;
      const deadline = Date.now() + 5_000;
      // Again until it ends: a cancel that lands between two statements is lost.
      while (!settled && Date.now() < deadline) {
        if (backendPid !== null) await cancelBackend(connectionString, backendPid);
        await Promise.race([done, new Promise((resolve) => setTimeout(resolve, 250))]);
      }
      // A server that never answers: the connection is dropped rather than waited on.
      if (!settled)
        (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
      await done;
    },
  };
}
