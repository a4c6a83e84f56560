/**
 * The workspace's configuration as the API reads and changes it: USD on the wire, microdollars
 * below it. Every change goes through GuardSettings, the only writer of what a decision reads.
 */
import type { KillSwitch, Workspace, WorkspaceUpdateBody } from '../contract/index.js';
import { ApiError } from '../errors.js';
import { usdToMicros } from '../money/decimal.js';
import { isTimeZone } from '../periods.js';
import { DEFAULT_STEP_RESERVATION_MICROS, type WorkspaceChanges } from '../store/workspaces.js';
import type { GuardSettings } from './guard-settings.js';
import type { Actor } from '../webhooks/webhook-events.js';
import { workspaceView } from './workspace-view.js';

/** Absent stays absent (left as it is), null stays null (unlimited). */
const micros = (value: number | null | undefined) =>
  value === undefined ? undefined : value === null ? null : usdToMicros(value);

function knownTimeZone(name: string): string {
  if (isTimeZone(name)) return name;
  throw new ApiError(
    'VALIDATION_FAILED',
    `Unknown time zone "${name}": give an IANA name such as Europe/Paris, or UTC.`,
    {
      errors: [{ path: 'body.time_zone', message: 'must be an IANA time zone name' }],
    },
  );
}

/** The body's changes in the records' units; a null step reservation goes back to the default. */
function workspaceChanges(body: WorkspaceUpdateBody): WorkspaceChanges {
  return {
    name: body.name,
    daily_budget_micros: micros(body.daily_budget_usd),
    user_daily_budget_micros: micros(body.user_daily_budget_usd),
    monthly_run_limit: body.monthly_run_limit,
    max_concurrent_runs: body.max_concurrent_runs,
    retention_days: body.retention_days,
    unpriced_models: body.unpriced_models,
    budget_mode: body.budget_mode,
    default_step_reservation_micros:
      body.default_step_reservation_usd === null
        ? DEFAULT_STEP_RESERVATION_MICROS
        : (micros(body.default_step_reservation_usd) ?? undefined),
    run_max_steps: body.run_max_steps,
    run_max_cost_micros: micros(body.run_max_cost_usd),
    run_max_identical_calls: body.run_max_identical_calls,
    user_steps_per_minute: body.user_steps_per_minute,
    time_zone: body.time_zone === undefined ? undefined : knownTimeZone(body.time_zone),
    tool_policy: body.tool_policy,
  };
}

export class WorkspaceConfig {
  constructor(private readonly settings: GuardSettings) {}

  async read(workspaceId: string): Promise<Workspace> {
    return workspaceView(await this.settings.workspace(workspaceId));
  }

  /** Budgets, limits (within the plan's ceilings) and the name; what the body leaves out stays. */
  async update(actor: Actor, workspaceId: string, body: WorkspaceUpdateBody): Promise<Workspace> {
    return workspaceView(await this.settings.updateWorkspace(actor, workspaceId, workspaceChanges(body)));
  }

  async setKillSwitch(actor: Actor, workspaceId: string, active: boolean): Promise<KillSwitch> {
    const updated = await this.settings.setKillSwitch(actor, workspaceId, active);
    return { active: updated.kill_switch_active, updated_at: updated.updated_at.toISOString() };
  }
}
