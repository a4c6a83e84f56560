/**
 * What a dead daemon left unfinished, ended: its proxied steps still ALLOWED become FAILED with
 * `output_json.error = "RESULT_LOST"`, charged at their estimate (`estimate_micros`, the upper
 * bound the proxy computed before forwarding; none: nothing charged), and the runs it started for
 * calls of their own are ended. Three statements for crash recovery to run in one transaction:
 * `loseSteps`, `endOrphanedRuns`, then `chargeLostSteps` last, so the day's spend rows (which every
 * run start and result of the workspace also raises) are held for the least time.
 */
import { SPEND_CAP_MICROS, type DailySpend } from './counters/counters.js';
import type { Queryable } from './db.js';
import { subjectTotals } from './step-finish.js';
import { STEP_SUBJECTS } from './subject-usage.js';

export interface LostStep {
  id: string;
  run_id: string;
  workspace_id: string;
  user_id: string;
  model: string | null;
  provider: string | null;
  /** What it is charged, in microdollars; null: it had no estimate, nothing is charged. */
  cost_micros: number | null;
  /** The subjects of key and tag budgets it counts against (`STEP_SUBJECTS`). */
  subjects: string[];
}

/** The `output_data` of a lost step: why, and what it was charged on. */
const LOST_OUTPUT = `json_build_object('error', 'RESULT_LOST',
  'charged', CASE WHEN s.estimate_micros IS NULL THEN 'nothing (no estimate)' ELSE 'estimate' END)`;

/**
 * Ends up to `limit` unfinished (ALLOWED) steps of the dead `daemonIds` as FAILED RESULT_LOST,
 * each with the cost of its estimate, finished at `now`. A step finished meanwhile (by its daemon,
 * which was not dead after all) is left as that finish wrote it: the status is checked again on
 * the row's latest version.
 */
export async function loseSteps(
  tx: Queryable,
  daemonIds: readonly number[],
  now: Date,
  limit: number,
): Promise<LostStep[]> {
  const { rows } = await tx.query<LostStep & { cost_micros: string | number | null }>(
    `WITH step AS (
       UPDATE steps s SET status = 'FAILED', finished_at = $2, output_json = ${LOST_OUTPUT},
         cost_usd = least(s.estimate_micros, ${SPEND_CAP_MICROS})::numeric / 1000000
       WHERE s.id IN (
           SELECT id FROM steps WHERE daemon_id = ANY($1::int[]) AND status = 'ALLOWED' ORDER BY id LIMIT $3)
         AND s.status = 'ALLOWED'
       RETURNING s.id, s.run_id, s.workspace_id, s.model, s.input_json ->> 'provider' AS provider,
         least(s.estimate_micros, ${SPEND_CAP_MICROS}) AS cost_micros, s.api_key_id
     )
     SELECT step.id, step.run_id, step.workspace_id, step.model, step.provider, step.cost_micros, r.user_id,
       ${STEP_SUBJECTS('step', 'r')} AS subjects
     FROM step JOIN runs r ON r.id = step.run_id ORDER BY step.id`,
    [daemonIds, now, limit],
  );
  return rows.map((row) => ({ ...row, cost_micros: row.cost_micros === null ? null : Number(row.cost_micros) }));
}

export interface EndedOrphanRun {
  id: string;
  workspace_id: string;
  user_id: string;
  status: 'COMPLETED' | 'FAILED';
}

/**
 * Ends the RUNNING runs the dead `daemonIds` started for calls of their own, once none of their
 * steps is unfinished: COMPLETED when every step completed (only the run's end was lost), FAILED
 * otherwise. Locked in id order, as endRuns locks runs.
 */
export async function endOrphanedRuns(
  tx: Queryable,
  daemonIds: readonly number[],
  now: Date,
): Promise<EndedOrphanRun[]> {
  const { rows } = await tx.query<EndedOrphanRun>(
    `WITH target AS (
       SELECT r.id FROM runs r
       WHERE r.daemon_id = ANY($1::int[]) AND r.status = 'RUNNING'
         AND NOT EXISTS (SELECT 1 FROM steps s WHERE s.run_id = r.id AND s.status = 'ALLOWED')
       ORDER BY r.id
       FOR NO KEY UPDATE OF r
     )
     UPDATE runs r SET ended_at = $2,
       status = CASE WHEN EXISTS (SELECT 1 FROM steps s WHERE s.run_id = r.id AND s.status <> 'COMPLETED')
         THEN 'FAILED' ELSE 'COMPLETED' END
     FROM target t WHERE r.id = t.id AND r.status = 'RUNNING'
     RETURNING r.id, r.workspace_id, r.user_id, r.status`,
    [daemonIds, now],
  );
  return rows;
}

/** A day's spend totals after a charge, for one workspace and user (what a counter copy takes). */
export interface ChargedTotals {
  workspace_id: string;
  user_id: string;
  time_zone: string;
  /** The day's totals; `subjects`: those of the workspace's subjects charged in this statement. */
  totals: DailySpend;
}

/**
 * Adds the lost steps' costs to their runs' totals and to the day's spend of their workspaces and
 * users, as finishSteps adds a result's: the same rows, capped the same way, locked in the same
 * order (workspaces, then users, each sorted), on each workspace's local day of `now`. Answers
 * the totals right after, per user, with the workspace's time zone.
 */
export async function chargeLostSteps(tx: Queryable, lost: readonly LostStep[], now: Date): Promise<ChargedTotals[]> {
  const charged = lost.filter((step) => step.cost_micros !== null && step.cost_micros > 0);
  if (charged.length === 0) return [];
  const { rows } = await tx.query<{
    workspace_id: string;
    user_id: string;
    workspace_total: string | number;
    user_total: string | number;
    time_zone: string;
    subject_totals: Record<string, string | number> | string | null;
  }>(
    `WITH v AS (
       SELECT v.*, (($3::timestamptz) AT TIME ZONE z.time_zone)::date AS day, z.time_zone
       FROM (SELECT * FROM json_to_recordset($1::json)
         AS v(run_id uuid, workspace_id uuid, user_id text, cost_micros bigint, subjects text[]) LIMIT $2) v
       JOIN workspaces z ON z.id = v.workspace_id
     ), run_total AS (
       INSERT INTO run_totals AS t (run_id, total_tokens, total_cost_usd)
       SELECT v.run_id, 0, sum(v.cost_micros)::numeric / 1000000 FROM v JOIN runs r ON r.id = v.run_id
       WHERE r.step_count IS NOT NULL GROUP BY v.run_id ORDER BY v.run_id
       ON CONFLICT (run_id) DO UPDATE SET total_cost_usd = t.total_cost_usd + EXCLUDED.total_cost_usd
     ), workspace_day AS (
       INSERT INTO usage_daily AS d (workspace_id, day, spend_micros)
       SELECT workspace_id, day, least(sum(cost_micros), ${SPEND_CAP_MICROS}) FROM v
       GROUP BY workspace_id, day ORDER BY workspace_id
       ON CONFLICT (workspace_id, day) DO UPDATE SET spend_micros = least(d.spend_micros + EXCLUDED.spend_micros, ${SPEND_CAP_MICROS})
       RETURNING workspace_id, spend_micros
     ), user_day AS (
       INSERT INTO user_usage_daily AS d (workspace_id, user_id, day, spend_micros)
       SELECT v.workspace_id, v.user_id, v.day, least(sum(v.cost_micros), ${SPEND_CAP_MICROS})
       FROM v JOIN workspace_day w ON w.workspace_id = v.workspace_id
       GROUP BY v.workspace_id, v.user_id, v.day ORDER BY v.workspace_id, v.user_id
       ON CONFLICT (workspace_id, user_id, day) DO UPDATE SET spend_micros = least(d.spend_micros + EXCLUDED.spend_micros, ${SPEND_CAP_MICROS})
       RETURNING workspace_id, user_id, spend_micros
     ), subject_day AS (
       INSERT INTO subject_usage_daily AS d (workspace_id, subject, day, spend_micros)
       SELECT v.workspace_id, x.subject, v.day, least(sum(v.cost_micros), ${SPEND_CAP_MICROS})
       FROM v CROSS JOIN LATERAL unnest(v.subjects) AS x(subject) JOIN workspace_day w ON w.workspace_id = v.workspace_id
       GROUP BY v.workspace_id, x.subject, v.day ORDER BY v.workspace_id, x.subject
       ON CONFLICT (workspace_id, subject, day) DO UPDATE SET spend_micros = least(d.spend_micros + EXCLUDED.spend_micros, ${SPEND_CAP_MICROS})
       RETURNING workspace_id, subject, spend_micros
     )
     SELECT u.workspace_id, u.user_id, w.spend_micros AS workspace_total, u.spend_micros AS user_total,
       (SELECT z.time_zone FROM workspaces z WHERE z.id = u.workspace_id) AS time_zone,
       (SELECT json_object_agg(d.subject, d.spend_micros) FROM subject_day d WHERE d.workspace_id = u.workspace_id) AS subject_totals
     FROM user_day u JOIN workspace_day w ON w.workspace_id = u.workspace_id`,
    [
      JSON.stringify(
        charged.map((step) => ({
          run_id: step.run_id,
          workspace_id: step.workspace_id,
          user_id: step.user_id.toWellFormed(),
          cost_micros: step.cost_micros,
          subjects: step.subjects,
        })),
      ),
      charged.length,
      now,
    ],
  );
  return rows.map((row) => ({
    workspace_id: row.workspace_id,
    user_id: row.user_id,
    time_zone: row.time_zone,
    totals: {
      workspaceDailySpendMicros: Number(row.workspace_total),
      userDailySpendMicros: Number(row.user_total),
      ...(row.subject_totals !== null && { subjects: subjectTotals(row.subject_totals) }),
    },
  }));
}
