/** MCP: the upstream servers a workspace registers, and tool prices (docs/mcp.md). */
import { Type } from '../../contract/typebox.js';
import type { FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { McpServerRegistry } from '../../mcp/server-registry.js';
import type { ToolPrices } from '../../mcp/tool-prices.js';
import {
  errorResponses,
  McpServer,
  McpServerBody,
  McpServerParams,
  ToolPatternParams,
  ToolPrice,
  ToolPriceBody,
} from '../schemas.js';

export const mcpRoutes: FastifyPluginAsync<{ servers: McpServerRegistry; toolPrices: ToolPrices }> = async (
  base,
  { servers, toolPrices },
) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  const auth = { auth: 'any' as const };

  app.post(
    '/v1/mcp/servers',
    {
      config: auth,
      schema: {
        tags: ['mcp'],
        summary:
          'Register an MCP server by name (or replace the one of that name); header values are stored, answered masked',
        body: McpServerBody,
        response: { 201: McpServer, ...errorResponses(400, 401, 422) },
      },
    },
    async (request, reply) =>
      reply.status(201).send(await servers.register(request.principal.workspaceId, request.body)),
  );

  app.get(
    '/v1/mcp/servers',
    {
      config: auth,
      schema: {
        tags: ['mcp'],
        summary: 'The registered MCP servers',
        response: { 200: Type.Array(McpServer), ...errorResponses(401) },
      },
    },
    async (request) => servers.list(request.principal.workspaceId),
  );

  app.delete(
    '/v1/mcp/servers/:name',
    {
      config: auth,
      schema: {
        tags: ['mcp'],
        summary: 'Remove an MCP server',
        params: McpServerParams,
        response: { 204: Type.Null(), ...errorResponses(401, 404, 422) },
      },
    },
    async (request, reply) => {
      await servers.remove(request.principal.workspaceId, request.params.name);
      return reply.status(204).send(null);
    },
  );

  app.get(
    '/v1/tool-pricing',
    {
      config: auth,
      schema: {
        tags: ['mcp'],
        summary: 'Tool prices per call',
        response: { 200: Type.Array(ToolPrice), ...errorResponses(401) },
      },
    },
    async (request) => toolPrices.list(request.principal.workspaceId),
  );

  app.put(
    '/v1/tool-pricing/:pattern',
    {
      config: auth,
      schema: {
        tags: ['mcp'],
        summary:
          'Set the price per call of the tools matching a pattern over `{server}.{tool}` (the most specific wins)',
        params: ToolPatternParams,
        body: ToolPriceBody,
        response: { 200: ToolPrice, ...errorResponses(401, 422) },
      },
    },
    async (request) => toolPrices.set(request.principal.workspaceId, request.params.pattern, request.body.per_call_usd),
  );

  app.delete(
    '/v1/tool-pricing/:pattern',
    {
      config: auth,
      schema: {
        tags: ['mcp'],
        summary: 'Delete a tool price',
        params: ToolPatternParams,
        response: { 204: Type.Null(), ...errorResponses(401, 404, 422) },
      },
    },
    async (request, reply) => {
      await toolPrices.remove(request.principal.workspaceId, request.params.pattern);
      return reply.status(204).send(null);
    },
  );
};
