/** `/health`: the daemon, its database and its counter store. 503 names what is down. */
import type { FastifyPluginAsync } from 'fastify';
import type { HealthCheck } from '../../admin/health-check.js';
import { Health } from '../schemas.js';

export const healthRoutes: FastifyPluginAsync<{ health: HealthCheck }> = async (app, { health }) => {
  app.get(
    '/health',
    {
      schema: { tags: ['health'], summary: 'Liveness and dependencies', response: { 200: Health, 503: Health } },
    },
    async (_request, reply) => {
      const report = await health.report();
      return report.status === 'ok' ? report : reply.status(503).send(report);
    },
  );
};
