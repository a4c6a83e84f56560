/**
 * Outstanding reservations (`budget_mode: "reserve"`), as the records hold them: every unfinished
 * (ALLOWED) step with an estimate in a RUNNING run reserves its estimate until its result is
 * written, when its cost replaces it in the same statement (finishSteps), or its run ends. This is
 * the truth the budget checks of reserve mode read under a per-workspace lock, and the truth a
 * Redis copy would be rebuilt from.
 */
import { SPEND_COLUMNS, spendParams, toSpend, type CounterScope, type DailySpend } from './counters/counters.js';
import type { Queryable } from './db.js';
import { STEP_SUBJECTS } from './subject-usage.js';

export interface Reserved {
  workspaceReservedMicros: number;
  userReservedMicros: number;
  /** By subject asked for (key and tag budgets'): what its steps reserve. */
  subjectsReservedMicros?: Record<string, number>;
}

/**
 * The outstanding steps (SQL, a FROM item `o`: estimate_micros, user_id, subjects) of workspace
 * $1, and the JSON object of what reserve those of each subject of $subjects (a text[]).
 */
const OUTSTANDING = `(SELECT s.estimate_micros, r.user_id, ${STEP_SUBJECTS('s', 'r')} AS subjects
     FROM steps s JOIN runs r ON r.id = s.run_id
     WHERE s.workspace_id = $1 AND s.status = 'ALLOWED' AND s.estimate_micros IS NOT NULL AND r.status = 'RUNNING') o`;
const subjectsReserved = (subjects: string) =>
  `(SELECT json_object_agg(x.subject, x.reserved) FROM (SELECT u.subject,
      coalesce(sum(o.estimate_micros) FILTER (WHERE u.subject = ANY(o.subjects)), 0) AS reserved
    FROM unnest(${subjects}::text[]) AS u(subject) CROSS JOIN ${OUTSTANDING} GROUP BY u.subject) x)`;

function reservedOf(
  subjects: readonly string[],
  row: { ws: string | number; usr: string | number; subj?: unknown },
): Reserved {
  const reserved: Reserved = { workspaceReservedMicros: Number(row.ws), userReservedMicros: Number(row.usr) };
  if (subjects.length) {
    const found = ((typeof row.subj === 'string' ? JSON.parse(row.subj) : row.subj) ?? {}) as Record<string, number>;
    reserved.subjectsReservedMicros = Object.fromEntries(
      subjects.map((subject) => [subject, Number(found[subject] ?? 0)]),
    );
  }
  return reserved;
}

export const NO_RESERVATIONS: Reserved = { workspaceReservedMicros: 0, userReservedMicros: 0 };

/**
 * Serializes the reserving checks of one workspace until the transaction ends, in every daemon:
 * the next check counts this one's step (its reservation) once it commits. Taken after the
 * admission lock where both are (lockAdmissions), never before it.
 */
export async function lockReservations(tx: Queryable, workspaceId: string): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('reserve:' || $1, 0))`, [workspaceId]);
}

/**
 * A workspace's outstanding reservations, its user's (steps_outstanding_estimates), and each of
 * `subjects`' (key and tag budgets').
 */
export async function outstandingReservations(
  db: Queryable,
  workspaceId: string,
  userId: string,
  subjects: readonly string[] = [],
): Promise<Reserved> {
  const { rows } = await db.query<{ ws: string | number; usr: string | number; subj: unknown }>(
    `SELECT coalesce(sum(o.estimate_micros), 0) AS ws,
       coalesce(sum(o.estimate_micros) FILTER (WHERE o.user_id = $2), 0) AS usr,
       ${subjects.length ? subjectsReserved('$3') : 'NULL'} AS subj
     FROM ${OUTSTANDING}`,
    subjects.length ? [workspaceId, userId, subjects] : [workspaceId, userId],
  );
  return reservedOf(subjects, rows[0]!);
}

/**
 * Today's spend from the records (as `recordedSpend` reads it) and the outstanding reservations,
 * in one round trip: what a reserving check reads under its lock (a statement of its own, after
 * the lock's: its snapshot must see what the check before it committed).
 */
export async function spendAndReservations(db: Queryable, scope: CounterScope): Promise<DailySpend & Reserved> {
  const subjects = scope.subjects ?? [];
  const { rows } = await db.query<
    Parameters<typeof toSpend>[0] & Record<'ws_reserved' | 'usr_reserved', string | number> & { subj: unknown }
  >(
    `SELECT ${SPEND_COLUMNS},
       coalesce(sum(o.estimate_micros), 0) AS ws_reserved,
       coalesce(sum(o.estimate_micros) FILTER (WHERE o.user_id = $3), 0) AS usr_reserved,
       ${subjects.length ? subjectsReserved('$6') : 'NULL'} AS subj
     FROM ${OUTSTANDING}`,
    spendParams(scope),
  );
  const row = rows[0]!;
  const reserved = reservedOf(subjects, { ws: row.ws_reserved, usr: row.usr_reserved, subj: row.subj });
  return { ...toSpend(row, scope), ...reserved };
}

/**
 * A run's outstanding reservations: its unfinished steps' estimates while it runs (0 once it
 * ended). What a run budget in reserve mode adds to the run's cost.
 */
export async function runReservedMicros(db: Queryable, workspaceId: string, runId: string): Promise<number> {
  const { rows } = await db.query<{ reserved: string | number }>(
    `SELECT coalesce(sum(s.estimate_micros), 0) AS reserved
     FROM steps s JOIN runs r ON r.id = s.run_id AND r.status = 'RUNNING'
     WHERE s.workspace_id = $1 AND s.run_id = $2 AND s.status = 'ALLOWED' AND s.estimate_micros IS NOT NULL`,
    [workspaceId, runId],
  );
  return Number(rows[0]!.reserved);
}
