/** Workspaces, their API keys, and the SDK users the rules read. */
import { hash, randomBytes, randomUUID } from 'node:crypto';
import type { PlanName } from '../contract/usage.js';
import { BUDGETS_OF_WORKSPACE, deleteKeyBudgets, toBudgetRules, type BudgetRule } from './budgets.js';
import type { Queryable } from './db.js';

/** The limits a run started with (microdollars for money); null: that limit is off. */
export interface RunLimitValues {
  maxSteps: number | null;
  maxCostMicros: number | null;
  maxIdenticalCalls: number | null;
}

export interface PlanLimits {
  monthly_run_limit: number | null;
  max_concurrent_runs: number | null;
  kill_switch: boolean;
}

/** Plan ceilings, which are also the defaults of a new workspace (null = unlimited). */
export const PLANS: Record<PlanName, PlanLimits> = {
  basic: { monthly_run_limit: 1_000, max_concurrent_runs: 5, kill_switch: false },
  pro: { monthly_run_limit: 25_000, max_concurrent_runs: 25, kill_switch: false },
  scale: { monthly_run_limit: 250_000, max_concurrent_runs: 100, kill_switch: true },
  enterprise: { monthly_run_limit: null, max_concurrent_runs: null, kill_switch: true },
};

export interface WorkspaceRow {
  id: string;
  name: string;
  plan: PlanName;
  kill_switch_active: boolean;
  daily_budget_micros: number | null;
  user_daily_budget_micros: number | null;
  monthly_run_limit: number | null;
  max_concurrent_runs: number | null;
  /** Days ended runs are kept; null: forever (migration 14). */
  retention_days: number | null;
  /** A MODEL_CALL step of a model without an active price: allowed (cost null) or denied. */
  unpriced_models: UnpricedModels;
  /** "reserve": each step reserves its cost estimate before it is allowed (migration 15). */
  budget_mode: BudgetMode;
  /** What an API step without max_cost_usd reserves in "reserve" mode. */
  default_step_reservation_micros: number;
  /** Defaults of the limits a run starts with (migration 17); null: none. */
  run_max_steps: number | null;
  run_max_cost_micros: number | null;
  run_max_identical_calls: number | null;
  /** Steps a user may create per minute, across its runs (rule user_rate); null: no limit. */
  user_steps_per_minute: number | null;
  /** IANA name: the zone whose local midnights start its days, weeks and months (migration 19). */
  time_zone: string;
  /** Which tools steps may call (rule tool_allowed, migration 20); null: every tool. */
  tool_policy: ToolPolicy | null;
  updated_at: Date;
}

export interface ToolPolicy {
  allow: string[] | null;
  deny: string[] | null;
}

export type UnpricedModels = 'allow' | 'deny';
export type BudgetMode = 'spend' | 'reserve';

/** A new workspace's default step reservation ($0.05): see docs/budgets.md. */
export const DEFAULT_STEP_RESERVATION_MICROS = 50_000;

const nullableNumber = (value: unknown): number | null =>
  value === null || value === undefined ? null : Number(value);

export function toWorkspace(row: Record<string, unknown>): WorkspaceRow {
  return {
    id: String(row.id),
    name: String(row.name),
    plan: row.plan as PlanName,
    kill_switch_active: Boolean(row.kill_switch_active),
    daily_budget_micros: nullableNumber(row.daily_budget_micros),
    user_daily_budget_micros: nullableNumber(row.user_daily_budget_micros),
    monthly_run_limit: nullableNumber(row.monthly_run_limit),
    max_concurrent_runs: nullableNumber(row.max_concurrent_runs),
    retention_days: nullableNumber(row.retention_days),
    unpriced_models: row.unpriced_models === 'deny' ? 'deny' : 'allow',
    budget_mode: row.budget_mode === 'reserve' ? 'reserve' : 'spend',
    default_step_reservation_micros:
      nullableNumber(row.default_step_reservation_micros) ?? DEFAULT_STEP_RESERVATION_MICROS,
    run_max_steps: nullableNumber(row.run_max_steps),
    run_max_cost_micros: nullableNumber(row.run_max_cost_micros),
    run_max_identical_calls: nullableNumber(row.run_max_identical_calls),
    user_steps_per_minute: nullableNumber(row.user_steps_per_minute),
    time_zone: typeof row.time_zone === 'string' ? row.time_zone : 'UTC',
    tool_policy: (row.tool_policy as ToolPolicy | null | undefined) ?? null,
    updated_at: row.updated_at as Date,
  };
}

export async function createWorkspace(db: Queryable, name: string, plan: PlanName): Promise<WorkspaceRow> {
  const limits = PLANS[plan];
  const { rows } = await db.query(
    `INSERT INTO workspaces (id, name, plan, monthly_run_limit, max_concurrent_runs)
     VALUES ($1, $2, $3, $4, $5) RETURNING *`,
    [randomUUID(), name, plan, limits.monthly_run_limit, limits.max_concurrent_runs],
  );
  return toWorkspace(rows[0]!);
}

export async function getWorkspace(db: Queryable, id: string): Promise<WorkspaceRow | null> {
  const { rows } = await db.query('SELECT * FROM workspaces WHERE id = $1', [id]);
  return rows[0] ? toWorkspace(rows[0]) : null;
}

/** The workspace's time zone (UTC for a workspace that is gone: it has nothing left to count). */
export async function workspaceTimeZone(db: Queryable, id: string): Promise<string> {
  const { rows } = await db.query<{ time_zone: string }>('SELECT time_zone FROM workspaces WHERE id = $1', [id]);
  return rows[0]?.time_zone ?? 'UTC';
}

/** Whether the database holds any workspace at all. */
export async function anyWorkspaceExists(db: Queryable): Promise<boolean> {
  const { rows } = await db.query('SELECT 1 FROM workspaces LIMIT 1');
  return rows.length > 0;
}

/** Locks the workspace's row until the transaction ends, without reading it. */
export async function lockWorkspaceRow(tx: Queryable, id: string): Promise<void> {
  await tx.query('SELECT 1 FROM workspaces WHERE id = $1 FOR UPDATE', [id]);
}

/** The workspace, locked until the transaction ends: changes to it are made one at a time. */
export async function lockWorkspace(tx: Queryable, id: string): Promise<WorkspaceRow | null> {
  const { rows } = await tx.query('SELECT * FROM workspaces WHERE id = $1 FOR UPDATE', [id]);
  return rows[0] ? toWorkspace(rows[0]) : null;
}

export async function setKillSwitch(db: Queryable, id: string, active: boolean, now: Date): Promise<WorkspaceRow> {
  const { rows } = await db.query(
    'UPDATE workspaces SET kill_switch_active = $2, updated_at = $3 WHERE id = $1 RETURNING *',
    [id, active, now],
  );
  return toWorkspace(rows[0]!);
}

// --- API keys -------------------------------------------------------------------------------

export const API_KEY_PATTERN = /^lg_([a-z0-9]{12})_([A-Za-z0-9_-]{32,256})$/;
const PREFIX_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

export function sha256(text: string): Buffer {
  // One-shot: every proxied call and API request hashes its key here, and a `Hash` object per
  // call cost three times the digest itself.
  return hash('sha256', text, 'buffer');
}

function randomPrefix(): string {
  // 36^12 ≈ 2^62; rejection-free modulo bias is irrelevant for a lookup prefix.
  return Array.from(randomBytes(12), (byte) => PREFIX_ALPHABET[byte % PREFIX_ALPHABET.length]).join('');
}

export interface IssuedKey {
  id: string;
  prefix: string;
  apiKey: string;
}

/** Issues a key: `lg_<prefix>_<secret>`, 256 random bits of secret, of which only SHA-256 is kept. */
export async function createApiKey(
  db: Queryable,
  workspaceId: string,
  name: string | null = null,
  role: 'admin' | 'agent' = 'admin',
): Promise<IssuedKey> {
  const id = randomUUID();
  const prefix = randomPrefix();
  const secret = randomBytes(32).toString('base64url');
  await db.query(
    'INSERT INTO api_keys (id, workspace_id, prefix, secret_sha256, name, role) VALUES ($1, $2, $3, $4, $5, $6)',
    [id, workspaceId, prefix, sha256(secret), name, role],
  );
  return { id, prefix, apiKey: `lg_${prefix}_${secret}` };
}

export interface ApiKeyRow {
  id: string;
  workspace_id: string;
  role: 'admin' | 'agent';
  secret_sha256: Buffer;
  revoked_at: Date | null;
  last_used_at: Date | null;
}

export async function findApiKey(db: Queryable, prefix: string): Promise<ApiKeyRow | null> {
  const { rows } = await db.query<ApiKeyRow>(
    'SELECT id, workspace_id, role, secret_sha256, revoked_at, last_used_at FROM api_keys WHERE prefix = $1',
    [prefix],
  );
  const row = rows[0];
  if (!row) return null;
  // PGlite hands bytea back as a Uint8Array, pg as a Buffer.
  return { ...row, secret_sha256: Buffer.from(row.secret_sha256) };
}

export async function touchApiKey(db: Queryable, id: string, now: Date): Promise<void> {
  await db.query('UPDATE api_keys SET last_used_at = $2 WHERE id = $1', [id, now]);
}

// --- State the rules read --------------------------------------------------------------------

export interface GuardState {
  workspace: WorkspaceRow;
  /** The workspace's budgets of `/v1/budgets` (rule 13). */
  budgets: BudgetRule[];
  userBlocked: boolean;
  /** The user's own daily budget, else the workspace's per-user budget. */
  userDailyBudgetMicros: number | null;
}

function toGuardState(row: Record<string, unknown>): GuardState {
  const workspace = toWorkspace(row);
  const override = nullableNumber(row.user_budget_override);
  return {
    workspace,
    budgets: toBudgetRules(row.budgets),
    userBlocked: row.user_blocked === true,
    userDailyBudgetMicros: override ?? workspace.user_daily_budget_micros,
  };
}

const GUARD_STATE_COLUMNS = `w.*, u.blocked AS user_blocked, u.daily_budget_micros AS user_budget_override,
  ${BUDGETS_OF_WORKSPACE}`;

export async function loadGuardState(db: Queryable, workspaceId: string, userId: string): Promise<GuardState> {
  const { rows } = await db.query(
    `SELECT ${GUARD_STATE_COLUMNS} FROM workspaces w
     LEFT JOIN sdk_users u ON u.workspace_id = w.id AND u.user_id = $2
     WHERE w.id = $1`,
    [workspaceId, userId],
  );
  if (!rows[0]) throw new Error(`workspace ${workspaceId} vanished`);
  return toGuardState(rows[0]);
}

/** The state for a step check, with the run's status and user, in one round trip. */
export async function loadStepGuardState(
  db: Queryable,
  workspaceId: string,
  runId: string,
): Promise<
  | (GuardState & {
      runStatus: string;
      userId: string;
      runLimits: RunLimitValues | null;
      runTags: Record<string, string>;
      runApiKeyId: string | null;
    })
  | null
> {
  const { rows } = await db.query(
    `SELECT ${GUARD_STATE_COLUMNS}, r.status AS run_status, r.user_id AS run_user_id, r.tags AS run_tags,
       r.api_key_id AS run_api_key_id,
       r.max_steps AS run_max_steps_applied, r.max_cost_micros AS run_max_cost_applied,
       r.max_identical_calls AS run_max_identical_applied
     FROM runs r
     JOIN workspaces w ON w.id = r.workspace_id
     LEFT JOIN sdk_users u ON u.workspace_id = r.workspace_id AND u.user_id = r.user_id
     WHERE r.id = $1 AND r.workspace_id = $2`,
    [runId, workspaceId],
  );
  const row = rows[0];
  if (!row) return null;
  const runLimits = {
    maxSteps: nullableNumber(row.run_max_steps_applied),
    maxCostMicros: nullableNumber(row.run_max_cost_applied),
    maxIdenticalCalls: nullableNumber(row.run_max_identical_applied),
  };
  return {
    ...toGuardState(row),
    runStatus: String(row.run_status),
    userId: String(row.run_user_id),
    runLimits: Object.values(runLimits).some((limit) => limit !== null) ? runLimits : null,
    runTags: row.run_tags as Record<string, string>,
    runApiKeyId: (row.run_api_key_id as string | null) ?? null,
  };
}

// --- Administration --------------------------------------------------------------------------

export interface WorkspaceChanges {
  name?: string;
  daily_budget_micros?: number | null;
  user_daily_budget_micros?: number | null;
  monthly_run_limit?: number | null;
  max_concurrent_runs?: number | null;
  plan?: PlanName;
  retention_days?: number | null;
  unpriced_models?: UnpricedModels;
  budget_mode?: BudgetMode;
  default_step_reservation_micros?: number;
  run_max_steps?: number | null;
  run_max_cost_micros?: number | null;
  run_max_identical_calls?: number | null;
  user_steps_per_minute?: number | null;
  time_zone?: string;
  tool_policy?: ToolPolicy | null;
}

const CHANGEABLE = [
  'name',
  'daily_budget_micros',
  'user_daily_budget_micros',
  'monthly_run_limit',
  'max_concurrent_runs',
  'plan',
  'retention_days',
  'unpriced_models',
  'budget_mode',
  'default_step_reservation_micros',
  'run_max_steps',
  'run_max_cost_micros',
  'run_max_identical_calls',
  'user_steps_per_minute',
  'time_zone',
  'tool_policy',
] as const;

const jsonParameter = (value: unknown) => (value !== null && typeof value === 'object' ? JSON.stringify(value) : value);

export async function updateWorkspace(
  db: Queryable,
  id: string,
  changes: WorkspaceChanges,
  now: Date,
): Promise<WorkspaceRow> {
  const columns = CHANGEABLE.filter((column) => changes[column] !== undefined);
  const sets = columns.map((column, i) => `${column} = $${i + 3}`);
  const { rows } = await db.query(
    `UPDATE workspaces SET ${[...sets, 'updated_at = $2'].join(', ')} WHERE id = $1 RETURNING *`,
    // An object (tool_policy) goes as its JSON text, whichever driver.
    [id, now, ...columns.map((column) => jsonParameter(changes[column]))],
  );
  return toWorkspace(rows[0]!);
}

export interface ApiKeyView {
  id: string;
  prefix: string;
  name: string | null;
  role: 'admin' | 'agent';
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

export async function listApiKeys(db: Queryable, workspaceId: string): Promise<ApiKeyView[]> {
  const { rows } = await db.query<ApiKeyView>(
    `SELECT id, prefix, name, role, created_at, last_used_at, revoked_at FROM api_keys
     WHERE workspace_id = $1 ORDER BY created_at DESC, id`,
    [workspaceId],
  );
  return rows;
}

/** A new key for the workspace; every key it had is revoked (their prefixes are answered). */
export async function regenerateApiKey(
  tx: Queryable,
  workspaceId: string,
  now: Date,
): Promise<IssuedKey & { revokedPrefixes: string[] }> {
  const { rows } = await tx.query<{ id: string; prefix: string }>(
    'UPDATE api_keys SET revoked_at = $2 WHERE workspace_id = $1 AND revoked_at IS NULL RETURNING id, prefix',
    [workspaceId, now],
  );
  // Their budgets go with them, as with a key revoked alone.
  await deleteKeyBudgets(
    tx,
    workspaceId,
    rows.map((row) => row.id),
  );
  return { ...(await createApiKey(tx, workspaceId, 'regenerated')), revokedPrefixes: rows.map((row) => row.prefix) };
}
