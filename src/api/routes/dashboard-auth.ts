/**
 * The dashboard's sign-in link (minted with an API key, redeemed once for a token), naming the
 * owner of the account a link made, and sign-out. See docs/dashboard.md.
 */
import { Type } from '../../contract/typebox.js';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Clock } from '../../clock.js';
import type { DashboardSignIn } from '../../admin/dashboard-sign-in.js';
import {
  AccessToken,
  errorResponses,
  NoBody,
  OwnerBody,
  SignInLink,
  SignInLinkRedeemBody,
  SignInLinkRedeemed,
} from '../../contract/index.js';

export interface DashboardAuthRouteOptions {
  signIn: DashboardSignIn;
  clock: Clock;
  /** Attempts per client address per minute on redeeming a link (as on login). */
  rateLimitPerMinute: number;
}

export const dashboardAuthRoutes: FastifyPluginAsync<DashboardAuthRouteOptions> = async (
  base,
  { signIn, clock, rateLimitPerMinute },
) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  const rateLimit = { max: rateLimitPerMinute, timeWindow: 60_000 };

  app.post(
    '/v1/auth/sign-in-links',
    {
      config: { auth: 'key' },
      schema: {
        tags: ['auth'],
        summary: "A one-time dashboard sign-in link to the key's workspace (single use, 10 minutes)",
        body: NoBody,
        response: {
          201: SignInLink,
          ...errorResponses(401, 422),
        },
      },
    },
    async (request, reply) => reply.status(201).send(await signIn.mintLink(request.principal.workspaceId, clock.now())),
  );

  app.post(
    '/v1/auth/sign-in-links/redeem',
    {
      config: { auth: 'none', rateLimit },
      schema: {
        tags: ['auth'],
        summary: "Exchange a sign-in link's token for a dashboard token (the link is used up)",
        security: [],
        body: SignInLinkRedeemBody,
        response: { 200: SignInLinkRedeemed, ...errorResponses(401, 422, 429) },
      },
    },
    async (request) => signIn.redeemLink(request.body.token, clock.now()),
  );

  app.post(
    '/v1/auth/owner',
    {
      config: { auth: 'jwt' },
      schema: {
        tags: ['auth'],
        summary: 'Name the email and password of an account a sign-in link made (once); answers a new token',
        body: OwnerBody,
        response: { 200: AccessToken, ...errorResponses(401, 409, 422) },
      },
    },
    async (request) => signIn.setOwner(request.principal.subjectId, request.body.email, request.body.password),
  );

  app.post(
    '/v1/auth/sign-out',
    {
      config: { auth: 'jwt' },
      schema: {
        tags: ['auth'],
        summary: 'End every session of the signed-in account (its tokens stop working)',
        body: NoBody,
        response: { 204: Type.Null(), ...errorResponses(401, 422) },
      },
    },
    async (request, reply) => {
      await signIn.signOut(request.principal.subjectId);
      return reply.status(204).send(null);
    },
  );
};
