/** Webhook deliveries: leased per endpoint, attempted, recorded, listed, replayed and purged. */
import type { Queryable } from './db.js';

/**
 * Leases up to `limit` endpoints whose oldest pending delivery is due, and that no other daemon
 * holds: while the lease lasts, only `owner` delivers to them.
 */
export async function leaseDueEndpoints(
  db: Queryable,
  owner: string,
  now: Date,
  until: Date,
  limit: number,
): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(
    `WITH due AS (
       SELECT e.id FROM webhook_endpoints e
       WHERE e.enabled AND (e.lease_until IS NULL OR e.lease_until < $1)
         AND (SELECT d.next_attempt_at FROM webhook_deliveries d
              WHERE d.endpoint_id = e.id AND d.status = 'pending' ORDER BY d.seq LIMIT 1) <= $1
       LIMIT $4 FOR UPDATE SKIP LOCKED
     )
     UPDATE webhook_endpoints e SET lease_owner = $3, lease_until = $2 FROM due WHERE e.id = due.id RETURNING e.id`,
    [now, until, owner, limit],
  );
  return rows.map((endpoint) => endpoint.id);
}

/** Extends the lease while `owner` still holds it; false when it was lost (expired and taken). */
export async function renewLease(db: Queryable, endpointId: string, owner: string, until: Date): Promise<boolean> {
  const { rowCount } = await db.query(
    'UPDATE webhook_endpoints SET lease_until = $3 WHERE id = $1 AND lease_owner = $2',
    [endpointId, owner, until],
  );
  return rowCount > 0;
}

export async function releaseLease(db: Queryable, endpointId: string, owner: string): Promise<void> {
  await db.query(
    'UPDATE webhook_endpoints SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2',
    [endpointId, owner],
  );
}

export interface DueDelivery {
  id: string;
  attempts: number;
  created_at: Date;
  event: { id: string; type: string; workspace_id: string; data: unknown; created_at: Date };
}

/** The endpoint's oldest pending delivery, when it is due. */
export async function headDelivery(db: Queryable, endpointId: string, now: Date): Promise<DueDelivery | null> {
  const { rows } = await db.query<Record<string, unknown>>(
    `SELECT d.id, d.attempts, d.created_at, d.next_attempt_at, e.id AS event_id, e.type, e.workspace_id, e.data, e.created_at AS event_created_at
     FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
     WHERE d.endpoint_id = $1 AND d.status = 'pending' ORDER BY d.seq LIMIT 1`,
    [endpointId],
  );
  const row = rows[0];
  if (!row || (row.next_attempt_at as Date) > now) return null;
  return {
    id: String(row.id),
    attempts: Number(row.attempts),
    created_at: row.created_at as Date,
    event: {
      id: String(row.event_id),
      type: String(row.type),
      workspace_id: String(row.workspace_id),
      data: row.data,
      created_at: row.event_created_at as Date,
    },
  };
}

/** The id of the one delivery an event was recorded with (an event for a single endpoint). */
export async function deliveryIdOfEvent(tx: Queryable, eventId: string): Promise<string> {
  const { rows } = await tx.query<{ id: string }>('SELECT id FROM webhook_deliveries WHERE event_id = $1', [eventId]);
  return rows[0]!.id;
}

export interface AttemptRecord {
  deliveryId: string;
  endpointId: string;
  attempt: number;
  attemptedAt: Date;
  statusCode: number | null;
  latencyMs: number;
  error: string | null;
  /** What becomes of the delivery. */
  outcome: { status: 'delivered' | 'failed'; at: Date } | { status: 'pending'; nextAttemptAt: Date };
  /** The endpoint answered 410 Gone: it is disabled, with this reason. */
  disableEndpoint: string | null;
}

export async function recordAttempt(tx: Queryable, record: AttemptRecord): Promise<void> {
  const outcome = record.outcome;
  await tx.query(
    `INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, status_code, latency_ms, error)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
    [record.deliveryId, record.attempt, record.attemptedAt, record.statusCode, record.latencyMs, record.error],
  );
  await tx.query(
    `UPDATE webhook_deliveries SET status = $2, attempts = $3, next_attempt_at = coalesce($4, next_attempt_at),
       finished_at = $5, last_status_code = $6, last_error = $7 WHERE id = $1`,
    [
      record.deliveryId,
      outcome.status,
      record.attempt,
      outcome.status === 'pending' ? outcome.nextAttemptAt : null,
      outcome.status === 'pending' ? null : outcome.at,
      record.statusCode,
      record.error,
    ],
  );
  if (record.disableEndpoint) {
    await tx.query(
      'UPDATE webhook_endpoints SET enabled = false, disabled_reason = $2, updated_at = $3 WHERE id = $1',
      [record.endpointId, record.disableEndpoint, record.attemptedAt],
    );
  }
}

export interface DeliveryView {
  id: string;
  event_id: string;
  event_type: string;
  status: string;
  attempts: number;
  created_at: Date;
  next_attempt_at: Date | null;
  finished_at: Date | null;
  last_status_code: number | null;
  last_error: string | null;
  attempt_log: {
    attempt: number;
    attempted_at: Date;
    status_code: number | null;
    latency_ms: number;
    error: string | null;
  }[];
}

/** The endpoint's deliveries, newest first, each with its attempts (the last 20). */
export async function listDeliveries(
  db: Queryable,
  endpointId: string,
  query: { status: string | null; page: number; perPage: number },
): Promise<{ items: DeliveryView[]; total: number }> {
  const [{ rows }, { rows: count }] = await Promise.all([
    db.query<Record<string, unknown>>(
      `SELECT d.*, e.type AS event_type,
         coalesce((SELECT json_agg(a ORDER BY a.attempt) FROM (
           SELECT attempt, attempted_at, status_code, latency_ms, error FROM webhook_attempts
           WHERE delivery_id = d.id ORDER BY attempt DESC LIMIT 20) a), '[]'::json) AS attempt_log
       FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
       WHERE d.endpoint_id = $1 AND ($2::text IS NULL OR d.status = $2)
       ORDER BY d.created_at DESC, d.seq DESC, d.id LIMIT $3 OFFSET $4`,
      [endpointId, query.status, query.perPage, (query.page - 1) * query.perPage],
    ),
    db.query<{ total: number }>(
      'SELECT count(*)::int AS total FROM webhook_deliveries WHERE endpoint_id = $1 AND ($2::text IS NULL OR status = $2)',
      [endpointId, query.status],
    ),
  ]);
  const items = rows.map((row) => ({
    id: String(row.id),
    event_id: String(row.event_id),
    event_type: String(row.event_type),
    status: String(row.status),
    attempts: Number(row.attempts),
    created_at: row.created_at as Date,
    next_attempt_at: row.status === 'pending' ? (row.next_attempt_at as Date) : null,
    finished_at: (row.finished_at as Date | null) ?? null,
    last_status_code: row.last_status_code === null ? null : Number(row.last_status_code),
    last_error: (row.last_error as string | null) ?? null,
    attempt_log: (row.attempt_log as DeliveryView['attempt_log']).map((attempt) => ({
      ...attempt,
      attempted_at: new Date(attempt.attempted_at),
    })),
  }));
  return { items, total: Number(count[0]!.total) };
}

/**
 * A new pending delivery of a delivered or failed one's event to the same endpoint, due now, at
 * the end of the endpoint's queue. Null when the delivery is not the endpoint's.
 */
export async function replayDelivery(
  db: Queryable,
  endpointId: string,
  deliveryId: string,
  now: Date,
): Promise<string | null> {
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO webhook_deliveries (id, endpoint_id, event_id, seq, next_attempt_at, created_at)
     SELECT gen_random_uuid(), d.endpoint_id, d.event_id, nextval(pg_get_serial_sequence('webhook_events', 'seq')), $3, $3
     FROM webhook_deliveries d WHERE d.id = $2 AND d.endpoint_id = $1
     RETURNING id`,
    [endpointId, deliveryId, now],
  );
  return rows[0]?.id ?? null;
}

/**
 * A threshold event's dedupe key must outlive the longest window it stands for (a month, and the
 * day after it when the window just over is still scanned): kept this long whatever the retention.
 */
export const THRESHOLD_EVENT_KEEP_MS = 33 * 86_400_000;

/**
 * Deletes finished deliveries and events older than `before` (events only once no delivery is
 * pending; threshold events not before `THRESHOLD_EVENT_KEEP_MS`, or the scan would send them again).
 */
export async function purgeWebhookHistory(db: Queryable, before: Date, now: Date): Promise<void> {
  await db.query(`DELETE FROM webhook_deliveries WHERE status <> 'pending' AND created_at < $1`, [before]);
  await db.query(
    `DELETE FROM webhook_events e WHERE e.created_at < $1
     AND (e.type <> 'budget.threshold' OR e.created_at < $2)
     AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id)`,
    [before, new Date(now.getTime() - THRESHOLD_EVENT_KEEP_MS)],
  );
}
