/**
 * Budgets of `/v1/budgets` as the API reads and changes them (rule 13): validated, stored, and
 * answered with their current window's spend and reset in the workspace's time zone. Each change
 * bumps the workspace's state version, so the very next decision of every daemon reads it.
 */
import type { Clock } from '../clock.js';
import type { Budget, BudgetCreateBody, BudgetListQuery, BudgetUpdateBody } from '../contract/index.js';
import { TAG_FILTER_PATTERN } from '../contract/runs.js';
import { ApiError } from '../errors.js';
import { microsToUsd, usdToMicros } from '../money/decimal.js';
import { localDay, periodWindow } from '../periods.js';
import {
  activeKeyExists,
  budgetWindowSpend,
  deleteBudget,
  getBudget,
  insertBudget,
  listBudgets,
  updateBudget,
  type BudgetRow,
} from '../store/budgets.js';
import type { CounterStore } from '../store/counters/counters.js';
import type { Db } from '../store/db.js';
import { workspaceTimeZone } from '../store/workspaces.js';

const invalid = (path: string, message: string, detail: string) =>
  new ApiError('VALIDATION_FAILED', detail, { errors: [{ path, message }] });

/** A tag pair as a budget names it, bounded as tags on runs: `project:search`. */
const TAG_PAIR = new RegExp(TAG_FILTER_PATTERN);

const DUPLICATE = 'A budget of this scope, subject and period exists: change its limit instead.';

export class BudgetsAdmin {
  constructor(
    private readonly db: Db,
    private readonly counters: CounterStore,
    private readonly clock: Clock,
  ) {}

  private async view(budget: BudgetRow, timeZone: string): Promise<Budget> {
    const local = localDay(this.clock.now(), timeZone);
    const window = periodWindow(local, budget.period);
    return {
      id: budget.id,
      scope: budget.scope,
      subject: budget.subject,
      period: budget.period,
      limit_usd: microsToUsd(budget.limit_micros),
      action: budget.action,
      spend_usd: microsToUsd(await budgetWindowSpend(this.db, budget, window.firstDay, local.day)),
      resets_at: window.resetsAt,
      created_at: budget.created_at.toISOString(),
    };
  }

  async list(workspaceId: string, query: BudgetListQuery): Promise<Budget[]> {
    const [budgets, zone] = await Promise.all([
      listBudgets(this.db, workspaceId, query),
      workspaceTimeZone(this.db, workspaceId),
    ]);
    return Promise.all(budgets.map((budget) => this.view(budget, zone)));
  }

  async get(workspaceId: string, id: string): Promise<Budget> {
    const budget = await getBudget(this.db, workspaceId, id);
    if (!budget) throw new ApiError('NOT_FOUND', 'The workspace has no budget with this id.');
    return this.view(budget, await workspaceTimeZone(this.db, workspaceId));
  }

  async create(workspaceId: string, body: BudgetCreateBody): Promise<Budget> {
    const subject = body.subject ?? null;
    if (body.scope === 'workspace' && subject !== null)
      throw invalid('body.subject', 'must be null for a workspace budget', 'A workspace budget has no subject.');
    if (body.scope === 'user' && subject === null)
      throw invalid('body.subject', 'must be the user id', 'A user budget names its user in `subject`.');
    if (body.scope === 'key' && (subject === null || !(await activeKeyExists(this.db, workspaceId, subject))))
      throw invalid(
        'body.subject',
        'must be the id of an active API key of the workspace',
        'A key budget names an active API key of the workspace in `subject` (its id, as GET /v1/api-keys lists it).',
      );
    if (body.scope === 'tag' && (subject === null || !TAG_PAIR.test(subject)))
      throw invalid(
        'body.subject',
        'must be a tag pair name:value (name 1 to 64 of a-z 0-9 _ . -, value 1 to 128 characters)',
        'A tag budget names its tag in `subject` as `name:value`, e.g. `project:search`, bounded as tags on runs.',
      );
    const created = await insertBudget(
      this.db,
      {
        workspace_id: workspaceId,
        scope: body.scope,
        // A key's id as Postgres spells it, so that the spend records' subject matches.
        subject: body.scope === 'key' ? subject!.toLowerCase() : subject,
        period: body.period,
        limit_micros: usdToMicros(body.limit_usd),
        action: body.action ?? 'deny',
      },
      this.clock.now(),
    );
    if (!created) throw new ApiError('CONFLICT', DUPLICATE);
    await this.counters.stateChanged(workspaceId);
    return this.view(created, await workspaceTimeZone(this.db, workspaceId));
  }

  /** A new period or limit applies from the next decision, counted from the new window's records. */
  async update(workspaceId: string, id: string, body: BudgetUpdateBody): Promise<Budget> {
    const updated = await updateBudget(this.db, workspaceId, id, {
      ...(body.period !== undefined && { period: body.period }),
      ...(body.limit_usd !== undefined && { limit_micros: usdToMicros(body.limit_usd) }),
      ...(body.action !== undefined && { action: body.action }),
    });
    if (updated === 'conflict') throw new ApiError('CONFLICT', DUPLICATE);
    if (!updated) throw new ApiError('NOT_FOUND', 'The workspace has no budget with this id.');
    await this.counters.stateChanged(workspaceId);
    return this.view(updated, await workspaceTimeZone(this.db, workspaceId));
  }

  /** Stops applying at the next decision, calls in flight included. */
  async remove(workspaceId: string, id: string): Promise<void> {
    if (!(await deleteBudget(this.db, workspaceId, id)))
      throw new ApiError('NOT_FOUND', 'The workspace has no budget with this id.');
    await this.counters.stateChanged(workspaceId);
  }
}
