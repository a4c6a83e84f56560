/** Budgets (`/v1/budgets`): a workspace's caps on spend by scope and period (rule 13). */
import { randomUUID } from 'node:crypto';
import type { BudgetAction, BudgetPeriod, BudgetScope } from '../contract/budgets.js';
import type { Queryable } from './db.js';

export interface BudgetRow {
  id: string;
  workspace_id: string;
  scope: BudgetScope;
  /** A user id, an API key id, a tag `key:value`; null for the workspace. */
  subject: string | null;
  period: BudgetPeriod;
  limit_micros: number;
  action: BudgetAction;
  created_at: Date;
}

export function toBudget(row: Record<string, unknown>): BudgetRow {
  return {
    id: String(row.id),
    workspace_id: String(row.workspace_id),
    scope: row.scope as BudgetScope,
    subject: (row.subject as string | null | undefined) ?? null,
    period: row.period as BudgetPeriod,
    limit_micros: Number(row.limit_micros),
    action: row.action as BudgetAction,
    created_at: row.created_at instanceof Date ? row.created_at : new Date(String(row.created_at)),
  };
}

/** Answers null when a budget of the same scope, subject and period exists (the unique index). */
export async function insertBudget(
  db: Queryable,
  budget: Omit<BudgetRow, 'id' | 'created_at'>,
  now: Date,
): Promise<BudgetRow | null> {
  const { rows } = await db.query(
    `INSERT INTO budgets (id, workspace_id, scope, subject, period, limit_micros, action, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT DO NOTHING RETURNING *`,
    [
      randomUUID(),
      budget.workspace_id,
      budget.scope,
      budget.subject,
      budget.period,
      budget.limit_micros,
      budget.action,
      now,
    ],
  );
  return rows[0] ? toBudget(rows[0]) : null;
}

export async function listBudgets(
  db: Queryable,
  workspaceId: string,
  filter: { scope?: BudgetScope; subject?: string } = {},
): Promise<BudgetRow[]> {
  const { rows } = await db.query(
    `SELECT * FROM budgets WHERE workspace_id = $1 AND ($2::text IS NULL OR scope = $2)
       AND ($3::text IS NULL OR subject = $3)
     ORDER BY created_at, id`,
    [workspaceId, filter.scope ?? null, filter.subject ?? null],
  );
  return rows.map(toBudget);
}

export async function getBudget(db: Queryable, workspaceId: string, id: string): Promise<BudgetRow | null> {
  const { rows } = await db.query('SELECT * FROM budgets WHERE workspace_id = $1 AND id = $2', [workspaceId, id]);
  return rows[0] ? toBudget(rows[0]) : null;
}

/**
 * Changes a budget's period, limit or action. Answers `conflict` when the new period is taken by
 * another budget of the same scope and subject.
 */
export async function updateBudget(
  db: Queryable,
  workspaceId: string,
  id: string,
  changes: { period?: BudgetPeriod; limit_micros?: number; action?: BudgetAction },
): Promise<BudgetRow | null | 'conflict'> {
  try {
    const { rows } = await db.query(
      `UPDATE budgets SET period = coalesce($3, period), limit_micros = coalesce($4, limit_micros),
         action = coalesce($5, action)
       WHERE workspace_id = $1 AND id = $2 RETURNING *`,
      [workspaceId, id, changes.period ?? null, changes.limit_micros ?? null, changes.action ?? null],
    );
    return rows[0] ? toBudget(rows[0]) : null;
  } catch (error) {
    if ((error as { code?: string }).code === '23505') return 'conflict';
    throw error;
  }
}

/**
 * A revoked key's budgets go with it: nothing can be done with the key any more, and a budget of a
 * key that no longer works would only be listed. Its spend records stay (reports read them).
 */
export async function deleteKeyBudgets(tx: Queryable, workspaceId: string, keyIds: readonly string[]): Promise<number> {
  const { rowCount } = await tx.query(
    `DELETE FROM budgets WHERE workspace_id = $1 AND scope = 'key' AND subject = ANY($2::text[])`,
    [workspaceId, keyIds],
  );
  return rowCount ?? 0;
}

export async function deleteBudget(db: Queryable, workspaceId: string, id: string): Promise<boolean> {
  const { rowCount } = await db.query('DELETE FROM budgets WHERE workspace_id = $1 AND id = $2', [workspaceId, id]);
  return (rowCount ?? 0) > 0;
}

/**
 * SQL: the spend in microdollars of the budget `budget` (an alias of a `budgets` row) over the local dates
 * `first` to `last` (SQL date expressions, both included), from the daily records (a key's and
 * a tag's: `subject_usage_daily`).
 */
export const windowSpendSql = (budget: string, first: string, last: string): string => `CASE ${budget}.scope
    WHEN 'workspace' THEN (SELECT coalesce(sum(u.spend_micros), 0) FROM usage_daily u
      WHERE u.workspace_id = ${budget}.workspace_id AND u.day >= ${first} AND u.day <= ${last})
    WHEN 'user' THEN (SELECT coalesce(sum(u.spend_micros), 0) FROM user_usage_daily u
      WHERE u.workspace_id = ${budget}.workspace_id AND u.user_id = ${budget}.subject
        AND u.day >= ${first} AND u.day <= ${last})
    WHEN 'key' THEN (SELECT coalesce(sum(u.spend_micros), 0) FROM subject_usage_daily u
      WHERE u.workspace_id = ${budget}.workspace_id AND u.subject = 'key:' || ${budget}.subject
        AND u.day >= ${first} AND u.day <= ${last})
    WHEN 'tag' THEN (SELECT coalesce(sum(u.spend_micros), 0) FROM subject_usage_daily u
      WHERE u.workspace_id = ${budget}.workspace_id AND u.subject = 'tag:' || ${budget}.subject
        AND u.day >= ${first} AND u.day <= ${last})
  END`;

/** A window's spend from the records, from its first local day to today. */
export async function budgetWindowSpend(
  db: Queryable,
  budget: BudgetRow,
  firstDay: string,
  today: string,
): Promise<number> {
  const { rows } = await db.query<{ spend: string | number | null }>(
    `SELECT ${windowSpendSql('b', '$3::date', '$4::date')} AS spend FROM budgets b WHERE b.workspace_id = $1 AND b.id = $2`,
    [budget.workspace_id, budget.id, firstDay, today],
  );
  return Number(rows[0]?.spend ?? 0);
}

/** Whether the workspace has an active (not revoked) API key of this id. */
export async function activeKeyExists(db: Queryable, workspaceId: string, keyId: string): Promise<boolean> {
  const { rows } = await db.query(
    `SELECT 1 FROM api_keys WHERE workspace_id = $1 AND id::text = lower($2) AND revoked_at IS NULL`,
    [workspaceId, keyId],
  );
  return rows.length > 0;
}

/** The workspace's budgets as the rules read them, in the state they read with the workspace. */
export const BUDGETS_OF_WORKSPACE = `(SELECT coalesce(json_agg(json_build_object(
    'id', b.id, 'scope', b.scope, 'subject', b.subject, 'period', b.period,
    'limit_micros', b.limit_micros, 'action', b.action) ORDER BY b.id), '[]'::json)
  FROM budgets b WHERE b.workspace_id = w.id) AS budgets`;

/** A budget as a decision reads it. */
export interface BudgetRule {
  id: string;
  scope: BudgetScope;
  subject: string | null;
  period: BudgetPeriod;
  limitMicros: number;
  action: BudgetAction;
}

export function toBudgetRules(value: unknown): BudgetRule[] {
  const list = typeof value === 'string' ? (JSON.parse(value) as unknown[]) : ((value ?? []) as unknown[]);
  return list.map((item) => {
    const budget = item as Record<string, unknown>;
    return {
      id: String(budget.id),
      scope: budget.scope as BudgetScope,
      subject: (budget.subject as string | null | undefined) ?? null,
      period: budget.period as BudgetPeriod,
      limitMicros: Number(budget.limit_micros),
      action: budget.action as BudgetAction,
    };
  });
}
