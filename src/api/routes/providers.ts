/** `GET /v1/providers`: the upstreams the proxy forwards to, and what sets each. */
import { Type } from '../../contract/typebox.js';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { UpstreamProvider } from '../../contract/index.js';
import type { ProviderRegistry } from '../../proxy/provider-registry.js';
import { errorResponses } from '../schemas.js';

export const providerRoutes: FastifyPluginAsync<{ providers: ProviderRegistry }> = async (base, { providers }) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  app.get(
    '/v1/providers',
    {
      config: { auth: 'any' },
      schema: {
        tags: ['proxy'],
        summary: "The providers the proxy forwards to: each one's upstream and the variable that sets it",
        response: { 200: Type.Array(UpstreamProvider), ...errorResponses(401) },
      },
    },
    async () => providers.upstreams(),
  );
};
