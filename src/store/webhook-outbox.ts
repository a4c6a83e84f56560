/**
 * The webhook outbox: events inserted in the transaction of the change they tell of, one pending
 * delivery per subscribed endpoint, and the scans' cursors.
 */
import type { BudgetPeriod } from '../contract/budgets.js';
import { windowSpendSql } from './budgets.js';
import type { Queryable } from './db.js';

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

/** A window of a period of one workspace, as a threshold scan looks at it (dates are local). */
export interface ScannedWindow {
  workspaceId: string;
  period: BudgetPeriod;
  firstDay: string;
  lastDay: string;
  /** The local date the scan stands on within the window: today, or the last day of one just over. */
  day: string;
  resetsAt: string;
}

/** The workspaces whose budgets a threshold scan looks at: some budget, and an endpoint that wants them. */
export async function workspacesWatchingBudgets(db: Queryable): Promise<{ id: string; time_zone: string }[]> {
  const { rows } = await db.query<{ id: string; time_zone: string }>(
    `SELECT w.id, w.time_zone FROM workspaces w
     WHERE EXISTS (SELECT 1 FROM budgets b WHERE b.workspace_id = w.id) AND ${subscribed('w.id', 'budget.threshold')}`,
  );
  return rows;
}

/**
 * `budget.threshold` for every budget of `/v1/budgets` (deny and alert alike) whose spend in a
 * window reached a fraction of its limit (fractions in parts per million), once per budget, period,
 * window and fraction: the dedupe key holds across daemons and rescans. Only workspaces with an
 * endpoint that wants them.
 */
export async function insertBudgetThresholdEvents(
  db: Queryable,
  windows: ScannedWindow[],
  fractionsPpm: number[],
  now: Date,
): Promise<number> {
  if (windows.length === 0) return 0;
  const column = <K extends keyof ScannedWindow>(key: K) => windows.map((window) => window[key]);
  const { rows } = await db.query<{ inserted: number }>(
    `WITH win AS (
       SELECT * FROM unnest($1::uuid[], $2::text[], $3::date[], $4::date[], $5::date[], $6::text[])
         AS w (workspace_id, period, first_day, last_day, day, resets_at)
     ), spent AS (
       SELECT b.id, b.workspace_id, b.scope, b.subject, b.period, b.action, b.limit_micros,
         win.first_day, win.day, win.resets_at, ${windowSpendSql('b', 'win.first_day', 'win.last_day')} AS spend_micros
       FROM win JOIN budgets b ON b.workspace_id = win.workspace_id AND b.period = win.period
       WHERE b.limit_micros > 0 AND ${subscribed('b.workspace_id', 'budget.threshold')}
     ), crossed AS (
       SELECT s.*, f.ppm FROM spent s CROSS JOIN (SELECT unnest($7::int[]) AS ppm) f
       WHERE s.spend_micros::numeric * 1000000 >= s.limit_micros::numeric * f.ppm
     )${fanOut(
       `SELECT ${EVENT_ID} AS id, workspace_id, 'budget.threshold' AS type,
         jsonb_build_array('budget.threshold', workspace_id, 'budget', id, period, first_day, ppm)::text AS dedupe_key,
         jsonb_build_object(
           'subject', jsonb_build_object('type', scope, 'id', coalesce(subject, workspace_id::text)),
           'day', day::text,
           'threshold', ppm::float8 / 1000000,
           'spend_usd', spend_micros::float8 / 1000000,
           'budget_usd', limit_micros::float8 / 1000000,
           'budget_id', id, 'scope', scope, 'period', period, 'action', action,
           'window_start', first_day::text, 'resets_at', resets_at) AS data,
         row_number() OVER (ORDER BY workspace_id, first_day, id, ppm) AS ord
       FROM crossed`,
       '$8',
     )}`,
    [
      column('workspaceId'),
      column('period'),
      column('firstDay'),
      column('lastDay'),
      column('day'),
      column('resetsAt'),
      fractionsPpm,
      now,
    ],
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
