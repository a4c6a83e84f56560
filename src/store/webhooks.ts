/**
 * Webhook endpoints, the event outbox and its deliveries. An event is inserted with one pending
 * delivery per enabled endpoint subscribed to its type, in the caller's transaction; daemons
 * claim endpoints by lease and work through each endpoint's queue in event order.
 */
import { randomUUID } from 'node:crypto';
import type { Queryable } from './db.js';

export type WebhookFormat = 'standard' | 'slack';

export interface EndpointRow {
  id: string;
  workspace_id: string;
  url: string;
  description: string | null;
  events: string[];
  format: WebhookFormat;
  secret: string;
  enabled: boolean;
  disabled_reason: string | null;
  created_at: Date;
  updated_at: Date;
}

function toEndpoint(row: Record<string, unknown>): EndpointRow {
  return {
    id: String(row.id),
    workspace_id: String(row.workspace_id),
    url: String(row.url),
    description: (row.description as string | null) ?? null,
    events: row.events as string[],
    format: row.format as WebhookFormat,
    secret: String(row.secret),
    enabled: Boolean(row.enabled),
    disabled_reason: (row.disabled_reason as string | null) ?? null,
    created_at: row.created_at as Date,
    updated_at: row.updated_at as Date,
  };
}

export interface NewEndpoint {
  workspaceId: string;
  url: string;
  description: string | null;
  events: string[];
  format: WebhookFormat;
  secret: string;
}

export async function insertEndpoint(db: Queryable, endpoint: NewEndpoint, now: Date): Promise<EndpointRow> {
  const { rows } = await db.query(
    `INSERT INTO webhook_endpoints (id, workspace_id, url, description, events, format, secret, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING *`,
    [
      randomUUID(),
      endpoint.workspaceId,
      endpoint.url,
      endpoint.description,
      endpoint.events,
      endpoint.format,
      endpoint.secret,
      now,
    ],
  );
  return toEndpoint(rows[0]!);
}

export async function listEndpoints(db: Queryable, workspaceId: string): Promise<EndpointRow[]> {
  const { rows } = await db.query('SELECT * FROM webhook_endpoints WHERE workspace_id = $1 ORDER BY created_at, id', [
    workspaceId,
  ]);
  return rows.map(toEndpoint);
}

export async function getEndpoint(db: Queryable, workspaceId: string, id: string): Promise<EndpointRow | null> {
  const { rows } = await db.query('SELECT * FROM webhook_endpoints WHERE workspace_id = $1 AND id = $2', [
    workspaceId,
    id,
  ]);
  return rows[0] ? toEndpoint(rows[0]) : null;
}

/** Any endpoint, by id alone: for the dispatcher, which works across workspaces. */
export async function endpointById(db: Queryable, id: string): Promise<EndpointRow | null> {
  const { rows } = await db.query('SELECT * FROM webhook_endpoints WHERE id = $1', [id]);
  return rows[0] ? toEndpoint(rows[0]) : null;
}

export interface EndpointChanges {
  url?: string;
  description?: string | null;
  events?: string[];
  format?: WebhookFormat;
  enabled?: boolean;
}

const CHANGEABLE = ['url', 'description', 'events', 'format', 'enabled'] as const;

export async function updateEndpoint(
  db: Queryable,
  workspaceId: string,
  id: string,
  changes: EndpointChanges,
  now: Date,
): Promise<EndpointRow | null> {
  const columns = CHANGEABLE.filter((column) => changes[column] !== undefined);
  const sets = columns.map((column, i) => `${column} = $${i + 4}`);
  // Enabled again by hand: the reason it was disabled no longer stands.
  if (changes.enabled === true) sets.push('disabled_reason = NULL');
  const { rows } = await db.query(
    `UPDATE webhook_endpoints SET ${[...sets, 'updated_at = $3'].join(', ')} WHERE workspace_id = $1 AND id = $2 RETURNING *`,
    [workspaceId, id, now, ...columns.map((column) => changes[column])],
  );
  return rows[0] ? toEndpoint(rows[0]) : null;
}

export async function deleteEndpoint(db: Queryable, workspaceId: string, id: string): Promise<boolean> {
  const { rowCount } = await db.query('DELETE FROM webhook_endpoints WHERE workspace_id = $1 AND id = $2', [
    workspaceId,
    id,
  ]);
  return rowCount > 0;
}

// --- The outbox ------------------------------------------------------------------------------

export interface NewEvent {
  id: string;
  workspaceId: string;
  type: string;
  /** At most one event per key, ever (across daemons); null: no such limit. */
  dedupeKey: string | null;
  data: unknown;
  now: Date;
  /** Only to this endpoint, whatever it subscribes to (a test ping). */
  endpointId?: string;
}

/**
 * Writes an event and its deliveries in one statement, in the caller's transaction. False when
 * an event with its dedupe key exists already (then nothing is written).
 */
export async function insertEvent(db: Queryable, event: NewEvent): Promise<boolean> {
  const { rows } = await db.query<{ inserted: boolean }>(
    `WITH e AS (
       INSERT INTO webhook_events (id, workspace_id, type, dedupe_key, data, created_at)
       VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING
       RETURNING id, seq, workspace_id, type, created_at
     ), d AS (
       INSERT INTO webhook_deliveries (id, endpoint_id, event_id, seq, next_attempt_at, created_at)
       SELECT gen_random_uuid(), ep.id, e.id, e.seq, e.created_at, e.created_at
       FROM e JOIN webhook_endpoints ep ON ep.workspace_id = e.workspace_id
       WHERE CASE WHEN $7::uuid IS NULL THEN ep.enabled AND e.type = ANY (ep.events) ELSE ep.id = $7::uuid END
     )
     SELECT EXISTS (SELECT 1 FROM e) AS inserted`,
    [
      event.id,
      event.workspaceId,
      event.type,
      event.dedupeKey,
      JSON.stringify(event.data),
      event.now,
      event.endpointId ?? null,
    ],
  );
  return rows[0]!.inserted;
}

/** Inserts the events a scan found (columns id, workspace_id, type, dedupe_key, data), fanned out. */
function fanOut(candidates: string, now: string): string {
  return `, e AS (
       INSERT INTO webhook_events (id, workspace_id, type, dedupe_key, data, created_at)
       SELECT id, workspace_id, type, dedupe_key, data, ${now} FROM (${candidates}) c ORDER BY ord
       ON CONFLICT DO NOTHING
       RETURNING id, seq, workspace_id, type, created_at
     ), d AS (
       INSERT INTO webhook_deliveries (id, endpoint_id, event_id, seq, next_attempt_at, created_at)
       SELECT gen_random_uuid(), ep.id, e.id, e.seq, e.created_at, e.created_at
       FROM e JOIN webhook_endpoints ep ON ep.workspace_id = e.workspace_id AND ep.enabled AND e.type = ANY (ep.events)
     )
     SELECT count(*)::int AS inserted FROM e`;
}

const EVENT_ID = `'evt_' || replace(gen_random_uuid()::text, '-', '')`;
const subscribed = (workspace: string, type: string) =>
  `EXISTS (SELECT 1 FROM webhook_endpoints ep WHERE ep.workspace_id = ${workspace} AND ep.enabled AND '${type}' = ANY (ep.events))`;

/**
 * `budget.threshold` for every workspace and user whose spend on `days` reached a fraction of its
 * daily budget (fractions in parts per million), once per subject, day and fraction: the dedupe
 * key holds across daemons and rescans. Only workspaces with an endpoint that wants them.
 */
export async function insertThresholdEvents(
  db: Queryable,
  days: string[],
  fractionsPpm: number[],
  now: Date,
): Promise<number> {
  const { rows } = await db.query<{ inserted: number }>(
    `WITH f AS (SELECT unnest($2::int[]) AS ppm),
     crossed AS (
       SELECT u.workspace_id, 'workspace' AS subject_type, u.workspace_id::text AS subject_id, u.day, u.spend_micros,
         w.daily_budget_micros AS budget_micros, f.ppm
       FROM usage_daily u JOIN workspaces w ON w.id = u.workspace_id CROSS JOIN f
       WHERE u.day = ANY ($1::date[]) AND w.daily_budget_micros > 0
         AND u.spend_micros::numeric * 1000000 >= w.daily_budget_micros::numeric * f.ppm
         AND ${subscribed('u.workspace_id', 'budget.threshold')}
       UNION ALL
       SELECT u.workspace_id, 'user', u.user_id, u.day, u.spend_micros,
         coalesce(s.daily_budget_micros, w.user_daily_budget_micros), f.ppm
       FROM user_usage_daily u JOIN workspaces w ON w.id = u.workspace_id
       LEFT JOIN sdk_users s ON s.workspace_id = u.workspace_id AND s.user_id = u.user_id
       CROSS JOIN f
       WHERE u.day = ANY ($1::date[]) AND coalesce(s.daily_budget_micros, w.user_daily_budget_micros) > 0
         AND u.spend_micros::numeric * 1000000 >= coalesce(s.daily_budget_micros, w.user_daily_budget_micros)::numeric * f.ppm
         AND ${subscribed('u.workspace_id', 'budget.threshold')}
     )${fanOut(
       `SELECT ${EVENT_ID} AS id, workspace_id, 'budget.threshold' AS type,
         jsonb_build_array('budget.threshold', workspace_id, subject_type, subject_id, day, ppm)::text AS dedupe_key,
         jsonb_build_object(
           'subject', jsonb_build_object('type', subject_type, 'id', subject_id),
           'day', day::text,
           'threshold', ppm::float8 / 1000000,
           'spend_usd', spend_micros::float8 / 1000000,
           'budget_usd', budget_micros::float8 / 1000000) AS data,
         row_number() OVER (ORDER BY workspace_id, subject_type DESC, subject_id, day, ppm) AS ord
       FROM crossed`,
       '$3',
     )}`,
    [days, fractionsPpm, now],
  );
  return rows[0]!.inserted;
}

/** Reasons that concern the whole workspace: aggregated per workspace, not per user. */
export const WORKSPACE_REASONS = [
  'KILL_SWITCH_ACTIVE',
  'WORKSPACE_DAILY_BUDGET_EXCEEDED',
  'MONTHLY_RUN_LIMIT_EXCEEDED',
  'MAX_CONCURRENT_RUNS_EXCEEDED',
];

/** Denials of any step or run start (`guard.denied`), or of tool calls alone, per tool (`tool.denied`). */
export type DenialEventType = 'guard.denied' | 'tool.denied';

/** A denial's key within its window: its subject and reason, and for `tool.denied` its tool (SQL, over `g`). */
const denialKey = (type: DenialEventType, windowStart: string) =>
  `'${type}', g.workspace_id, g.workspace_wide, g.subject_id, g.reason${type === 'tool.denied' ? ', g.tool' : ''}, ${windowStart}`;

/** The dedupe key of a window's first denial of a subject and reason, sent at once (SQL, over `g`). */
const FIRST_DENIAL_KEY = (type: DenialEventType, windowStart: string) =>
  `jsonb_build_array(${denialKey(type, windowStart)}, 'first')::text`;

/** What a kind of denial event counts: every blocked run start and step, or blocked tool calls. */
const DENIED: Record<DenialEventType, string> = {
  'guard.denied': `SELECT r.workspace_id, r.user_id, r.decision->>'reason' AS reason, r.started_at AS at, 'run_start' AS boundary, NULL::text AS tool
       FROM runs r WHERE r.status = 'BLOCKED' AND r.started_at >= $1 AND r.started_at < $2
       UNION ALL
       SELECT s.workspace_id, r.user_id, s.decision->>'reason', s.created_at, 'step', NULL
       FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.status = 'BLOCKED' AND s.created_at >= $1 AND s.created_at < $2`,
  'tool.denied': `SELECT s.workspace_id, r.user_id, s.decision->>'reason' AS reason, s.created_at AS at, 'step' AS boundary, s.tool_name AS tool
       FROM steps s JOIN runs r ON r.id = s.run_id
       WHERE s.status = 'BLOCKED' AND s.type = 'TOOL_CALL' AND s.created_at >= $1 AND s.created_at < $2`,
};

/**
 * `guard.denied` events for the denials (blocked run starts and steps) in [from, to) of the window
 * [windowStart, windowEnd), per subject and reason. The subject is the workspace for
 * workspace-wide reasons, else the user.
 *
 * - `first`: the window's first denial of each subject and reason, one event each, sent as soon
 *   as it is seen (`count` 1, `first` true): a blocked agent is reported at once.
 * - else the window's count, once it has ended (`first` false): only where there was more than
 *   the first, or the first was never sent (no daemon scanned while the window was open).
 */
export async function insertDenialEvents(
  db: Queryable,
  window: { from: Date; to: Date; windowStart: Date; windowEnd: Date; first: boolean },
  now: Date,
  type: DenialEventType = 'guard.denied',
): Promise<number> {
  const { rows } = await db.query<{ inserted: number }>(
    `WITH denied AS (
       ${DENIED[type]}
     ), grouped AS (
       SELECT workspace_id, reason = ANY ($3::text[]) AS workspace_wide,
         CASE WHEN reason = ANY ($3::text[]) THEN workspace_id::text ELSE user_id END AS subject_id, reason, tool,
         count(*) AS total, count(*) FILTER (WHERE boundary = 'run_start') AS run_starts,
         count(DISTINCT user_id) AS users, min(at) AS first_at, max(at) AS last_at,
         (array_agg(boundary ORDER BY at))[1] AS first_boundary
       FROM denied d WHERE ${subscribed('d.workspace_id', type)}
       GROUP BY 1, 2, 3, 4, 5
     ), g AS (
       SELECT * FROM grouped g WHERE $6::boolean
         OR g.total > 1 OR NOT EXISTS (SELECT 1 FROM webhook_events e WHERE e.dedupe_key = ${FIRST_DENIAL_KEY(type, '$4::timestamptz')})
     )${fanOut(
       `SELECT ${EVENT_ID} AS id, workspace_id, '${type}' AS type,
         CASE WHEN $6 THEN ${FIRST_DENIAL_KEY(type, '$4::timestamptz')}
           ELSE jsonb_build_array(${denialKey(type, '$4::timestamptz')})::text END AS dedupe_key,
         jsonb_build_object(
           'subject', jsonb_build_object('type', CASE WHEN workspace_wide THEN 'workspace' ELSE 'user' END, 'id', subject_id),
           'reason', reason, 'first', $6::boolean,
           'count', CASE WHEN $6 THEN 1 ELSE total END,
           'run_starts', CASE WHEN $6 THEN (first_boundary = 'run_start')::int ELSE run_starts END,
           'steps', CASE WHEN $6 THEN (first_boundary = 'step')::int ELSE total - run_starts END,
           'users', CASE WHEN $6 THEN 1 ELSE users END,
           'window_start', to_char($4::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
           'window_end', to_char($5::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
           'first_at', to_char(first_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
           'last_at', to_char(CASE WHEN $6 THEN first_at ELSE last_at END AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))${
             type === 'tool.denied' ? ` || jsonb_build_object('tool', tool)` : ''
           } AS data,
         row_number() OVER (ORDER BY workspace_id, first_at, subject_id, reason) AS ord
       FROM g`,
       '$7',
     )}`,
    [window.from, window.to, WORKSPACE_REASONS, window.windowStart, window.windowEnd, window.first, now],
  );
  return rows[0]!.inserted;
}

/** `run.failed` for runs that ended FAILED in [from, to), once per run, for endpoints that opted in. */
export async function insertRunFailedEvents(db: Queryable, from: Date, to: Date, now: Date): Promise<number> {
  const { rows } = await db.query<{ inserted: number }>(
    `WITH failed AS (
       -- Totals as the run detail reads them: kept per run, else (older runs) summed from steps.
       SELECT r.id, r.workspace_id, r.user_id, r.started_at, r.ended_at,
         coalesce(r.step_count, (SELECT count(*) FROM steps s WHERE s.run_id = r.id)) AS step_count,
         coalesce(t.total_tokens, (SELECT sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)) FROM steps s WHERE s.run_id = r.id), 0) AS total_tokens,
         coalesce(t.total_cost_usd, (SELECT sum(cost_usd) FROM steps s WHERE s.run_id = r.id), 0) AS total_cost_usd
       FROM runs r LEFT JOIN run_totals t ON t.run_id = r.id
       WHERE r.status = 'FAILED' AND r.ended_at >= $1 AND r.ended_at < $2
         AND ${subscribed('r.workspace_id', 'run.failed')}
     )${fanOut(
       `SELECT ${EVENT_ID} AS id, workspace_id, 'run.failed' AS type,
         jsonb_build_array('run.failed', id)::text AS dedupe_key,
         jsonb_build_object('run_id', id, 'user_id', user_id,
           'started_at', to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
           'ended_at', to_char(ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
           'step_count', step_count, 'total_tokens', total_tokens, 'total_cost_usd', total_cost_usd::float8) AS data,
         row_number() OVER (ORDER BY ended_at, id) AS ord
       FROM failed`,
       '$3',
     )}`,
    [from, to, now],
  );
  return rows[0]!.inserted;
}

/**
 * Takes a scan's cursor for the rest of the transaction, or null when another daemon holds it.
 * A cursor seen for the first time starts at `initial`.
 */
export async function lockCursor(tx: Queryable, name: string, initial: Date): Promise<Date | null> {
  await tx.query('INSERT INTO webhook_cursors (name, position) VALUES ($1, $2) ON CONFLICT DO NOTHING', [
    name,
    initial,
  ]);
  const { rows } = await tx.query<{ position: Date }>(
    'SELECT position FROM webhook_cursors WHERE name = $1 FOR UPDATE SKIP LOCKED',
    [name],
  );
  return rows[0]?.position ?? null;
}

export async function moveCursor(tx: Queryable, name: string, position: Date): Promise<void> {
  await tx.query('UPDATE webhook_cursors SET position = $2 WHERE name = $1', [name, position]);
}

// --- Delivery --------------------------------------------------------------------------------

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

/** Deletes finished deliveries and events older than `before` (events only once no delivery is pending). */
export async function purgeWebhookHistory(db: Queryable, before: Date): Promise<void> {
  await db.query(`DELETE FROM webhook_deliveries WHERE status <> 'pending' AND created_at < $1`, [before]);
  await db.query(
    `DELETE FROM webhook_events e WHERE e.created_at < $1
     AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id)`,
    [before],
  );
}
