/** Dashboard accounts: register, login, me, password change. Login and register are rate limited. */
import { Type } from 'typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { ApiError } from '../../errors.js';
import type { Accounts } from '../../service/accounts.js';
import { Account, errorResponses, Uuid, WorkspaceRef } from '../schemas.js';

const Email = Type.String({ format: 'email', maxLength: 254 });
const Password = Type.String({ minLength: 8, maxLength: 1024 });
const Token = Type.Object({
  access_token: Type.String(),
  token_type: Type.Literal('bearer'),
  expires_in: Type.Integer(),
});
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
        body: Type.Object(
          {
            email: Email,
            password: Password,
            workspace_name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
          },
          { additionalProperties: false },
        ),
        response: {
          201: Type.Object({
            account: Type.Object({ id: Uuid, email: Type.String(), created_at: Type.String({ format: 'date-time' }) }),
            workspace: WorkspaceRef,
            api_key: Type.String(),
            ...Token.properties,
          }),
          ...errorResponses(400, 403, 409, 422, 429),
        },
      },
    },
    async (request, reply) => reply.status(201).send(await accounts.register(request.body)),
  );

  app.post(
    '/v1/auth/login',
    {
      config: { auth: 'none', rateLimit },
      schema: {
        tags: ['auth'],
        summary: 'Exchange email and password for a dashboard token',
        security: [],
        body: Type.Object(
          { email: Type.String({ maxLength: 254 }), password: Type.String({ maxLength: 1024 }) },
          { additionalProperties: false },
        ),
        response: { 200: Token, ...errorResponses(400, 401, 422, 429) },
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
        body: Type.Object(
          { current_password: Type.String({ maxLength: 1024 }), new_password: Password },
          { additionalProperties: false },
        ),
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
