/**
 * Counters the rules read. Daily spend (workspace and user) is read on every decision: a
 * counter store answers it from the records (SQL) or from a fast copy of them (Redis). Run
 * counts (allowed this month, RUNNING now) are read only at run start, from the records, under
 * a per-workspace lock that makes admissions linearizable across every daemon.
 */
import { localDay } from '../../periods.js';
import type { Queryable } from '../db.js';
import type { StepSlot, StepSlotRequest } from './step-rate.js';

/**
 * Where a day's spend counter stops: 10^15 microdollars, the largest budget the API accepts
 * ($10^9). A spend at or above it denies under every budget, so saturating there changes no
 * decision, and it keeps counters (and one step's share of them) exact in a bigint and in a JSON
 * number: the largest token counts at the largest prices would otherwise overflow both.
 */
export const SPEND_CAP_MICROS = 1_000_000_000_000_000;

export interface CounterScope {
  workspaceId: string;
  userId: string;
  /** The local day in the workspace's time zone, `YYYY-MM-DD`. */
  day: string;
  /** The local month, `YYYY-MM`. */
  month: string;
  /**
   * Where budgets of a week or a month apply (rule 13): the first local day of their window, whose
   * spend up to today is read with the day's.
   */
  weekStart?: string;
  monthStart?: string;
  /**
   * The subjects of key and tag budgets that apply to the call (`key:<api key id>`,
   * `tag:<name>:<value>`, see `budgetSubjects`): their spend is read with the day's, today's and
   * the scope's windows'. Absent or empty: none.
   */
  subjects?: readonly string[];
}

/**
 * A scope with no user: a workspace's day, as the usage report and the reconcile read its counters.
 * Read, it answers the workspace's spend and its subjects' (a user's: 0); raised or set, it touches
 * its subjects' counters alone (the workspace's are raised with a user's). No user's is written.
 */
export type WorkspaceScope = Omit<CounterScope, 'userId'> & { userId?: undefined };

/** What the spend of the counters is read and written for: a user's scope, or a workspace's alone. */
export type SpendScope = CounterScope | WorkspaceScope;

/** A key or tag budget's subject as the counters name it: `key:<api key id>`, `tag:<name>:<value>`. */
export const subjectOf = (scope: 'key' | 'tag', subject: string): string => `${scope}:${subject}`;

/** A subject's spend: today's, and the scope's windows' where it asks for them. */
export interface SubjectSpend {
  day: number;
  week?: number;
  month?: number;
}

/** A window's spend so far, today's included. */
export interface WindowSpend {
  workspaceMicros: number;
  userMicros: number;
}

export interface DailySpend {
  workspaceDailySpendMicros: number;
  userDailySpendMicros: number;
  /** This week's and this month's spend, where the scope asks for them. */
  week?: WindowSpend;
  month?: WindowSpend;
  /** By subject (`CounterScope.subjects`): each one's spend; a subject that spent nothing is 0. */
  subjects?: Record<string, SubjectSpend>;
}

export interface RunCounts {
  monthlyRuns: number;
  concurrentRuns: number;
}

export type Counters = DailySpend & RunCounts;

/** What a decision reads from the counter store, in one round trip. */
export interface DecisionCounters {
  spend: DailySpend;
  /**
   * The version of what the rules read from the workspace's records (its settings and kill
   * switch, its users' blocks and budgets), shared by every daemon: state remembered at a version
   * may be used while the version is current. Null: not known now, read the records.
   */
  stateVersion: string | null;
}

export interface CounterStore {
  readonly kind: 'redis' | 'sql';
  readSpend(scope: SpendScope): Promise<DailySpend>;
  /** The day's spend and the workspace's state version, read together. */
  readDecisionInputs(scope: CounterScope): Promise<DecisionCounters>;
  /**
   * A step's cost committed. `totals` are the day's totals right after it, read back from the
   * records in the same statement, so a copy can take the larger of what it has and these.
   */
  spendRecorded(scope: SpendScope, totals: DailySpend): Promise<void>;
  /** Sets a copy to the records' totals exactly, down as well as up (reconciliation only). */
  resyncSpend(scope: SpendScope, totals: DailySpend): Promise<void>;
  /**
   * A change to what the rules read from a workspace's records committed: every copy of it
   * remembered at an earlier version is out of date.
   */
  stateChanged(workspaceId: string): Promise<void>;
  /**
   * A place in the user's window of steps per minute, taken when it has room (rule user_rate).
   * `tx` is the step's transaction: the database's window is kept in it.
   */
  takeStepSlot(tx: Queryable, scope: CounterScope, request: StepSlotRequest): Promise<StepSlot>;
  health(): Promise<void>;
  close(): Promise<void>;
}

/** The scope of a moment: its day and month in the workspace's time zone. */
export function scopeAt(now: Date, workspaceId: string, userId: string, timeZone: string): CounterScope {
  const { day, month } = localDay(now, timeZone);
  return { workspaceId, userId, day, month };
}

/** The scope of a moment with no user (`WorkspaceScope`): its day and month in the workspace's time zone. */
export function workspaceScopeAt(now: Date, workspaceId: string, timeZone: string): WorkspaceScope {
  const { day, month } = localDay(now, timeZone);
  return { workspaceId, day, month };
}

/** The sum of a daily table's spend from the local day `from` to today ($2), where `from` is given. */
const windowSum = (table: string, user: boolean, from: string) =>
  `CASE WHEN ${from}::date IS NULL THEN NULL ELSE (SELECT coalesce(sum(spend_micros), 0) FROM ${table}
    WHERE workspace_id = $1${user ? ' AND user_id = $3' : ''} AND day >= ${from}::date AND day <= $2::date) END`;

/**
 * The scope's subjects' spend (SQL, a JSON object by subject of `[day, week, month]`, week and
 * month null where not asked for): from the earliest window's first day to today, one range read.
 */
const SUBJECTS_SPEND = `(SELECT json_object_agg(x.subject, json_build_array(x.d, x.w, x.m)) FROM (
    SELECT subject, coalesce(sum(spend_micros) FILTER (WHERE day = $2::date), 0) AS d,
      CASE WHEN $4::date IS NULL THEN NULL ELSE coalesce(sum(spend_micros) FILTER (WHERE day >= $4::date), 0) END AS w,
      CASE WHEN $5::date IS NULL THEN NULL ELSE coalesce(sum(spend_micros) FILTER (WHERE day >= $5::date), 0) END AS m
    FROM subject_usage_daily
    WHERE workspace_id = $1 AND subject = ANY($6::text[]) AND day <= $2::date
      AND day >= least($2::date, coalesce($4::date, $2::date), coalesce($5::date, $2::date))
    GROUP BY subject) x)`;

/**
 * SQL of today's spend (`ws`, `usr`), the scope's windows' (`ws_week`, `usr_week`, `ws_month`,
 * `usr_month`; null where not asked for) and its subjects' (`subjects`), with the parameters of
 * `spendParams` ($1 to $6).
 */
export const SPEND_COLUMNS = `
  (SELECT spend_micros FROM usage_daily WHERE workspace_id = $1 AND day = $2::date) AS ws,
  (SELECT spend_micros FROM user_usage_daily WHERE workspace_id = $1 AND user_id = $3 AND day = $2::date) AS usr,
  ${windowSum('usage_daily', false, '$4')} AS ws_week,
  ${windowSum('user_usage_daily', true, '$4')} AS usr_week,
  ${windowSum('usage_daily', false, '$5')} AS ws_month,
  ${windowSum('user_usage_daily', true, '$5')} AS usr_month,
  ${SUBJECTS_SPEND} AS subjects`;

export const spendParams = (scope: SpendScope) => [
  scope.workspaceId,
  scope.day,
  scope.userId ?? null,
  scope.weekStart ?? null,
  scope.monthStart ?? null,
  scope.subjects ?? [],
];

type SpendRow = Record<'ws' | 'usr' | 'ws_week' | 'usr_week' | 'ws_month' | 'usr_month', string | number | null> & {
  subjects?: unknown;
};

type SubjectsRow = Record<string, [number | string, number | string | null, number | string | null]>;

/** Each subject of the scope with its spend, 0 where the records have none. */
export function subjectsSpend(scope: SpendScope, value: unknown): Record<string, SubjectSpend> | undefined {
  if (!scope.subjects?.length) return undefined;
  const found = ((typeof value === 'string' ? JSON.parse(value) : value) ?? {}) as SubjectsRow;
  const spend: Record<string, SubjectSpend> = {};
  for (const subject of scope.subjects) {
    const [day = 0, week = 0, month = 0] = found[subject] ?? [];
    spend[subject] = {
      day: Number(day),
      ...(scope.weekStart !== undefined && { week: Number(week ?? 0) }),
      ...(scope.monthStart !== undefined && { month: Number(month ?? 0) }),
    };
  }
  return spend;
}

export function toSpend(row: SpendRow, scope?: SpendScope): DailySpend {
  const spend: DailySpend = {
    workspaceDailySpendMicros: Number(row.ws ?? 0),
    userDailySpendMicros: Number(row.usr ?? 0),
  };
  if (row.ws_week !== null) spend.week = { workspaceMicros: Number(row.ws_week), userMicros: Number(row.usr_week) };
  if (row.ws_month !== null) spend.month = { workspaceMicros: Number(row.ws_month), userMicros: Number(row.usr_month) };
  const subjects = scope && subjectsSpend(scope, row.subjects);
  if (subjects) spend.subjects = subjects;
  return spend;
}

/** Today's spend (and the scope's windows') from the records: the truth every copy is rebuilt from. */
export async function recordedSpend(db: Queryable, scope: SpendScope): Promise<DailySpend> {
  const { rows } = await db.query<SpendRow>(`SELECT ${SPEND_COLUMNS}`, spendParams(scope));
  return toSpend(rows[0]!, scope);
}

/**
 * Serializes the run starts of one workspace until the transaction ends, in every daemon: the
 * next start counts this one's run record.
 */
export async function lockAdmissions(tx: Queryable, workspaceId: string): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('admit:' || $1, 0))`, [workspaceId]);
}

/** Allowed runs this month (at most 31 usage rows) and RUNNING runs (a partial index). */
export async function runCounts(db: Queryable, scope: Pick<CounterScope, 'workspaceId' | 'month'>): Promise<RunCounts> {
  const { rows } = await db.query<{ monthly: string | number; running: string | number }>(
    `SELECT
       (SELECT coalesce(sum(runs), 0) FROM usage_daily
         WHERE workspace_id = $1 AND day >= $2::date AND day < ($2::date + interval '1 month')) AS monthly,
       (SELECT count(*) FROM runs WHERE workspace_id = $1 AND status = 'RUNNING') AS running`,
    [scope.workspaceId, `${scope.month}-01`],
  );
  return { monthlyRuns: Number(rows[0]!.monthly), concurrentRuns: Number(rows[0]!.running) };
}
