/** Workspace configuration: the state the rules read. */
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { usdToMicros } from '../../money/decimal.js';
import type { GuardSettings } from '../../service/guard-settings.js';
import { workspaceView } from '../../service/workspace-view.js';
import { DEFAULT_STEP_RESERVATION_MICROS } from '../../store/workspaces.js';
import { errorResponses, KillSwitch, KillSwitchBody, Workspace, WorkspaceUpdateBody } from '../schemas.js';
import { actorOf } from '../actor.js';

const micros = (value: number | null | undefined) =>
  value === undefined ? undefined : value === null ? null : usdToMicros(value);

export const workspaceRoutes: FastifyPluginAsync<{ settings: GuardSettings }> = async (base, { settings }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.get(
    '/v1/workspace',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['workspace'],
        summary: 'Workspace configuration',
        response: { 200: Workspace, ...errorResponses(401) },
      },
    },
    async (request) => workspaceView(await settings.workspace(request.principal.workspaceId)),
  );

  app.patch(
    '/v1/workspace',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['workspace'],
        summary: 'Change budgets (USD, null = unlimited) and limits (within the plan)',
        body: WorkspaceUpdateBody,
        response: { 200: Workspace, ...errorResponses(400, 401, 403, 422) },
      },
    },
    async (request) => {
      const b = request.body;
      const updated = await settings.updateWorkspace(actorOf(request.principal), request.principal.workspaceId, {
        name: b.name,
        daily_budget_micros: micros(b.daily_budget_usd),
        user_daily_budget_micros: micros(b.user_daily_budget_usd),
        monthly_run_limit: b.monthly_run_limit,
        max_concurrent_runs: b.max_concurrent_runs,
        retention_days: b.retention_days,
        unpriced_models: b.unpriced_models,
        budget_mode: b.budget_mode,
        default_step_reservation_micros:
          b.default_step_reservation_usd === null
            ? DEFAULT_STEP_RESERVATION_MICROS
            : (micros(b.default_step_reservation_usd) ?? undefined),
        run_max_steps: b.run_max_steps,
        run_max_cost_micros: micros(b.run_max_cost_usd),
        run_max_identical_calls: b.run_max_identical_calls,
        user_steps_per_minute: b.user_steps_per_minute,
      });
      return workspaceView(updated);
    },
  );

  app.post(
    '/v1/workspace/kill-switch',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['workspace'],
        summary: 'Turn the kill switch on or off (Scale plan or higher)',
        body: KillSwitchBody,
        response: { 200: KillSwitch, ...errorResponses(400, 401, 403, 422) },
      },
    },
    async (request) => {
      const updated = await settings.setKillSwitch(
        actorOf(request.principal),
        request.principal.workspaceId,
        request.body.active,
      );
      return { active: updated.kill_switch_active, updated_at: updated.updated_at.toISOString() };
    },
  );
};
