/**
 * The daemon processes that forward proxied calls on a database, and whether each still lives.
 * A daemon registers at start and beats a heartbeat; it is dead once it stopped, once its
 * heartbeat is older than the lease, or once its process is gone from this machine (a pid is
 * looked up only in the PID namespace and kernel that wrote it, see directory-lock.ts). Times are
 * the database's (`clock_timestamp()`), so the daemons' clocks need not agree on a lease.
 */
import type { Queryable } from './db.js';
import { processGone, THIS_PROCESS } from './embedded/directory-lock.js';

/** A dead instance's row is kept this long after its last heartbeat (for a person looking into a crash). */
const KEEP_DEAD_FOR = `interval '1 day'`;
/**
 * How long after its recovery a dead instance is looked at again: a daemon found dead while alive
 * (silent past its lease) may still write a step with its old id until its next heartbeat tells
 * it, seconds later; those are recovered too. Longer would only lock rows for nothing.
 */
const LOOK_AGAIN_FOR = `interval '10 minutes'`;

/** Registers this process as a new instance; answers its id. */
export async function registerInstance(db: Queryable, version: string): Promise<number> {
  const { rows } = await db.query<{ id: number }>(
    `INSERT INTO daemon_instances (host, pid, kernel, pid_space, version, started_at, heartbeat_at)
     VALUES ($1, $2, $3, $4, $5, clock_timestamp(), clock_timestamp()) RETURNING id`,
    [THIS_PROCESS.host, process.pid, THIS_PROCESS.kernel, THIS_PROCESS.pidSpace, version],
  );
  return Number(rows[0]!.id);
}

/**
 * Beats the instance's heartbeat. False when it may not: it stopped, or it was found dead and its
 * calls were recovered (it did not beat for the lease): it must register anew.
 */
export async function beat(db: Queryable, id: number): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE daemon_instances SET heartbeat_at = clock_timestamp()
     WHERE id = $1 AND stopped_at IS NULL AND recovered_at IS NULL`,
    [id],
  );
  return rowCount > 0;
}

/** The instance stopped cleanly: whatever it left is recovered at once, by any daemon. */
export async function markStopped(db: Queryable, id: number): Promise<void> {
  await db.query('UPDATE daemon_instances SET stopped_at = clock_timestamp() WHERE id = $1', [id]);
}

export interface DeadInstanceQuery {
  /** The instance asking, never found dead. */
  self: number;
  /** A heartbeat older than this is a dead daemon's; null: a lapsed heartbeat says nothing now. */
  leaseMs: number | null;
  /**
   * Every other instance is dead (an embedded database: its directory lock lets one process in at
   * a time, and that is this one).
   */
  othersDead?: boolean;
}

/**
 * The instances that no longer live, locked for this transaction (`SKIP LOCKED`: one recovering
 * daemon at a time per instance; another passes over it). Those recovered in the last
 * LOOK_AGAIN_FOR are found again, so that a step their late writes left is recovered too.
 */
export async function lockDeadInstances(tx: Queryable, query: DeadInstanceQuery): Promise<number[]> {
  const goneHere = await instancesGoneHere(tx, query.self);
  const { rows } = await tx.query<{ id: number }>(
    `SELECT id FROM daemon_instances
     WHERE id <> $1 AND CASE WHEN recovered_at IS NOT NULL THEN recovered_at > clock_timestamp() - ${LOOK_AGAIN_FOR}
       ELSE $2 OR stopped_at IS NOT NULL OR heartbeat_at < clock_timestamp() - $3::bigint * interval '1 millisecond'
         OR id = ANY($4::int[]) END
     ORDER BY id FOR UPDATE SKIP LOCKED`,
    [query.self, query.othersDead ?? false, query.leaseMs, goneHere],
  );
  return rows.map((row) => Number(row.id));
}

/** Other instances that wrote their pid from this machine's PID namespace, and whose process is gone. */
async function instancesGoneHere(db: Queryable, self: number): Promise<number[]> {
  const { rows } = await db.query<{ id: number; pid: number; kernel: string; pid_space: string }>(
    `SELECT id, pid, kernel, pid_space FROM daemon_instances
     WHERE id <> $1 AND kernel = $2 AND pid_space = $3 AND stopped_at IS NULL AND recovered_at IS NULL`,
    [self, THIS_PROCESS.kernel, THIS_PROCESS.pidSpace],
  );
  return rows
    .filter((row) => processGone({ pid: Number(row.pid), kernel: row.kernel, pidSpace: row.pid_space }))
    .map((row) => Number(row.id));
}

/** The dead instances' recovery committed: said once (recovered_at), kept for later passes. */
export async function markRecovered(tx: Queryable, ids: readonly number[]): Promise<number[]> {
  const { rows } = await tx.query<{ id: number }>(
    `UPDATE daemon_instances SET recovered_at = clock_timestamp()
     WHERE id = ANY($1::int[]) AND recovered_at IS NULL RETURNING id`,
    [ids],
  );
  return rows.map((row) => Number(row.id));
}

/** Forgets the dead instances whose last heartbeat is a day old. */
export async function purgeDeadInstances(db: Queryable): Promise<number> {
  const { rowCount } = await db.query(
    `DELETE FROM daemon_instances
     WHERE (stopped_at IS NOT NULL OR recovered_at IS NOT NULL) AND heartbeat_at < clock_timestamp() - ${KEEP_DEAD_FOR}`,
  );
  return rowCount;
}
