/**
 * The app factory: builds the HTTP API from its dependencies. Nothing happens at import time,
 * and nothing here reads the environment; the daemon and the tests pass everything in.
 */
import { randomUUID } from 'node:crypto';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import type { Logger } from 'pino';
import { Accounts } from '../service/accounts.js';
import { GuardService, type Clock } from '../service/guard-service.js';
import { TokenIssuer } from '../service/tokens.js';
import type { CounterStore } from '../store/counters.js';
import type { Db } from '../store/db.js';
import { registerAuth } from './auth.js';
import { registerErrorHandler } from './error-handler.js';
import { registerValidation } from './validation.js';
import { apiKeyRoutes } from './routes/api-keys.js';
import { authRoutes } from './routes/auth.js';
import { healthRoutes } from './routes/health.js';
import { pricingRoutes } from './routes/pricing.js';
import { runRoutes } from './routes/runs.js';
import { usageRoutes } from './routes/usage.js';
import { userRoutes } from './routes/users.js';
import { workspaceRoutes } from './routes/workspace.js';

export interface AppDeps {
  db: Db;
  counters: CounterStore;
  clock: Clock;
  logger: Logger;
  version: string;
  bodyLimitBytes: number;
  auth: AuthSettings;
}

export interface AuthSettings {
  /** HS256 signing secret for dashboard tokens. */
  jwtSecret: string;
  jwtTtlSeconds: number;
  /** scrypt N; OWASP's 2^17 in production, lower in tests. */
  scryptCost: number;
  /** Login and register attempts per client address per minute. */
  rateLimitPerMinute: number;
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
  const accounts = new Accounts(deps.db, new TokenIssuer(deps.auth.jwtSecret, deps.auth.jwtTtlSeconds), deps.auth.scryptCost);
  registerAuth(app, { db: deps.db, clock: deps.clock, verifyJwt: (token) => accounts.verifyToken(token) });
  // Only routes that ask for it (login, register) are limited.
  await app.register(rateLimit, { global: false });

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
  await app.register(authRoutes, { accounts, rateLimitPerMinute: deps.auth.rateLimitPerMinute });
  await app.register(apiKeyRoutes, { db: deps.db, clock: deps.clock });
  await app.register(userRoutes, { db: deps.db, clock: deps.clock });
  await app.register(usageRoutes, { db: deps.db, counters: deps.counters, clock: deps.clock });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  return app;
}
