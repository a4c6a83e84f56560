/**
 * The app factory: builds the HTTP API from its dependencies. Nothing happens at import time,
 * and nothing here reads the environment; the daemon and the tests pass everything in.
 */
import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import type { Logger } from 'pino';
import { GuardService, type Clock } from '../service/guard-service.js';
import type { CounterStore } from '../store/counters.js';
import type { Db } from '../store/db.js';
import { registerAuth } from './auth.js';
import { registerErrorHandler } from './error-handler.js';
import { registerValidation } from './validation.js';
import { healthRoutes } from './routes/health.js';
import { pricingRoutes } from './routes/pricing.js';
import { runRoutes } from './routes/runs.js';
import { workspaceRoutes } from './routes/workspace.js';
import { proxyTokenRoutes } from './routes/proxy-tokens.js';
import { proxyRequestSerializer, proxyRoutes, type ProxyOptions } from '../proxy/proxy-routes.js';

export interface AppDeps {
  db: Db;
  counters: CounterStore;
  clock: Clock;
  logger: Logger;
  version: string;
  bodyLimitBytes: number;
  /** Proxy mode: forwarding model calls to the configured providers. Absent: no proxy routes. */
  proxy?: ProxyOptions;
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit: deps.bodyLimitBytes,
    routerOptions: { ignoreTrailingSlash: true },
    genReqId: (req) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.-]{1,128}$/.test(given) ? given : randomUUID();
    },
  });
  app.addHook('onSend', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });

  registerValidation(app);
  registerErrorHandler(app);
  registerAuth(app, { db: deps.db, clock: deps.clock });

  await app.register(swagger, {
    openapi: {
      info: { title: 'runguard', version: deps.version, description: 'Guardrail sidecar for AI agents' },
      components: {
        securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'API key (lg_...) or dashboard JWT' } },
      },
      security: [{ bearer: [] }],
    },
  });

  const guard = new GuardService(deps.db, deps.counters, deps.clock, deps.logger);
  await app.register(healthRoutes, { db: deps.db, counters: deps.counters, version: deps.version });
  await app.register(runRoutes, { guard, db: deps.db, clock: deps.clock });
  await app.register(pricingRoutes, { db: deps.db, clock: deps.clock });
  await app.register(workspaceRoutes, { db: deps.db, clock: deps.clock });
  if (deps.proxy) {
    await app.register(proxyTokenRoutes, { db: deps.db, clock: deps.clock, providers: deps.proxy.providers });
    await app.register(proxyRoutes, {
      guard, db: deps.db, clock: deps.clock, options: deps.proxy,
      // Proxy URLs can carry a run's token (and a gateway's key in the query): neither is logged.
      logSerializers: { req: proxyRequestSerializer },
    });
  }
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  return app;
}
