/** Dashboard accounts: register, login, me, password change. Login and register are rate limited. */
import { Type } from '../../contract/typebox.js';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ApiError, isApiError } from '../../errors.js';
import type { Accounts } from '../../admin/accounts.js';
import {
  AccessToken,
  Account,
  errorResponses,
  LoginBody,
  PasswordChangeBody,
  RegisterBody,
  Registered,
} from '../schemas.js';

export interface AuthRouteOptions {
  accounts: Accounts;
  /** Attempts per client address per minute on login and register. */
  rateLimitPerMinute: number;
  /** `closed`: register answers 403 (accounts come from an operator, not from whoever reaches the port). */
  registration: 'open' | 'closed';
}

export const authRoutes: FastifyPluginAsync<AuthRouteOptions> = async (
  base,
  { accounts, rateLimitPerMinute, registration },
) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  // Against brute force and credential stuffing: per client address.
  const rateLimit = { max: rateLimitPerMinute, timeWindow: 60_000 };

  app.post(
    '/v1/auth/register',
    {
      config: { auth: 'none', rateLimit },
      // Refused from the request line: a closed daemon reads no body and hashes no password.
      onRequest: async () => {
        if (registration === 'closed') {
          throw new ApiError('FORBIDDEN', 'Registration is closed on this daemon (configuration key "registration").');
        }
      },
      schema: {
        tags: ['auth'],
        summary: 'Create an account, its workspace (basic plan) and its first API key (shown once)',
        security: [],
        body: RegisterBody,
        response: { 201: Registered, ...errorResponses(400, 403, 409, 422, 429) },
      },
    },
    async (request, reply) => {
      try {
        return reply.status(201).send(await accounts.register(request.body));
      } catch (error) {
        // The contract answers a taken email 409, which tells whoever asks that the address has an
        // account (docs/threat-model.md says why it stays): each such answer is in the log, and
        // register is rate limited per client address like login.
        if (isApiError(error) && error.code === 'CONFLICT')
          request.log.warn({ ip: request.ip }, 'registration refused: an account with this email exists');
        throw error;
      }
    },
  );

  app.post(
    '/v1/auth/login',
    {
      config: { auth: 'none', rateLimit },
      schema: {
        tags: ['auth'],
        summary: 'Exchange email and password for a dashboard token',
        security: [],
        body: LoginBody,
        response: { 200: AccessToken, ...errorResponses(400, 401, 422, 429) },
      },
    },
    async (request) => accounts.login(request.body),
  );

  app.get(
    '/v1/auth/me',
    {
      config: { auth: 'jwt' },
      schema: {
        tags: ['auth'],
        summary: 'The logged-in account',
        response: {
          200: Account,
          ...errorResponses(401),
        },
      },
    },
    async (request) => accounts.me(request.principal.subjectId),
  );

  app.post(
    '/v1/auth/password',
    {
      config: { auth: 'jwt' },
      schema: {
        tags: ['auth'],
        summary: 'Change the password; tokens issued before stop working',
        body: PasswordChangeBody,
        response: { 204: Type.Null(), ...errorResponses(400, 401, 422) },
      },
    },
    async (request, reply) => {
      await accounts.changePassword(
        request.principal.subjectId,
        request.body.current_password,
        request.body.new_password,
      );
      return reply.status(204).send(null);
    },
  );
};
