/** `/health`: the daemon, its database and its counter store. 503 names what is down. */
import type { FastifyPluginAsync } from 'fastify';
import type { Db } from '../../store/db.js';
import type { CounterStore } from '../../store/counters.js';
import { Health } from '../schemas.js';

const CHECK_TIMEOUT_MS = 2_000;

async function check(probe: () => Promise<unknown>): Promise<'ok' | 'unavailable'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('timeout')), CHECK_TIMEOUT_MS);
  });
  try {
    await Promise.race([probe(), timeout]);
    return 'ok';
  } catch {
    return 'unavailable';
  } finally {
    clearTimeout(timer);
  }
}

export const healthRoutes: FastifyPluginAsync<{ db: Db; counters: CounterStore; version: string }> = async (
  app,
  { db, counters, version },
) => {
  app.get(
    '/health',
    {
      schema: { tags: ['health'], summary: 'Liveness and dependencies', response: { 200: Health, 503: Health } },
    },
    async (_request, reply) => {
      const [database, counterStore] = await Promise.all([
        check(() => db.query('SELECT 1')),
        check(() => counters.health()),
      ]);
      const checks = { database, counters: counterStore };
      const down = Object.entries(checks)
        .filter(([, v]) => v !== 'ok')
        .map(([k]) => k);
      if (down.length === 0) return { status: 'ok', version, checks, counter_store: counters.kind };
      return reply.status(503).send({
        status: 'unavailable',
        version,
        checks,
        counter_store: counters.kind,
        detail: `Unavailable: ${down.join(', ')}.`,
        code: 'SERVICE_UNAVAILABLE',
      });
    },
  );
};
