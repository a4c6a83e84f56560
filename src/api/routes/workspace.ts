/** Workspace state the rules read. */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ApiError } from '../../errors.js';
import type { Clock } from '../../service/guard-service.js';
import type { Db } from '../../store/db.js';
import { getWorkspace, PLANS, setKillSwitch } from '../../store/workspaces.js';
import { errorResponses } from '../schemas.js';

export const workspaceRoutes: FastifyPluginAsync<{ db: Db; clock: Clock }> = async (base, { db, clock }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  app.post('/v1/workspace/kill-switch', {
    config: { auth: 'any' },
    schema: {
      tags: ['workspace'],
      summary: 'Turn the kill switch on or off (Scale plan or higher)',
      body: Type.Object({ active: Type.Boolean() }, { additionalProperties: false }),
      response: {
        200: Type.Object({ active: Type.Boolean(), updated_at: Type.String({ format: 'date-time' }) }),
        ...errorResponses(400, 401, 403, 422),
      },
    },
  }, async (request) => {
    const workspace = await getWorkspace(db, request.principal.workspaceId);
    if (!workspace) throw new ApiError('UNAUTHORIZED');
    if (!PLANS[workspace.plan].kill_switch) {
      throw new ApiError('PLAN_REQUIRED', `The kill switch needs the scale plan or higher; this workspace is on ${workspace.plan}.`);
    }
    const updated = await setKillSwitch(db, workspace.id, request.body.active, clock.now());
    return { active: updated.kill_switch_active, updated_at: updated.updated_at.toISOString() };
  });
};
