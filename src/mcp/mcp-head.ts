/**
 * What is known of an MCP request before a byte of its body is read: its target (workspace, run,
 * user), the registered server it is for, and its body's reservation. An unknown server or a
 * compressed body is refused at once.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BodyBudget, BodyReservation, declaredLength, meteredBody, overloaded } from '../proxy/body-budget.js';
import type { Target, TargetRequest } from '../proxy/call-target.js';
import { INVALID_REQUEST, JsonRpcRefusal, SERVER_ERROR } from './jsonrpc.js';
import type { McpServerRegistry } from './server-registry.js';

export interface McpParams {
  server: string;
  run_id?: string;
  token?: string;
}

export interface McpHead {
  target: Target;
  server: { name: string; url: URL; headers: Record<string, string> };
  reservation: BodyReservation;
}

declare module 'fastify' {
  interface FastifyRequest {
    mcpCall: McpHead | null;
  }
}

export interface McpHeadOptions {
  resolveTarget: (request: TargetRequest) => Promise<Target>;
  servers: McpServerRegistry;
  budget: BodyBudget;
  bodyLimitBytes: number;
}

/** The MCP routes' `onRequest` and `preParsing` hooks. */
export function mcpHeadHooks(options: McpHeadOptions) {
  const { resolveTarget, servers, budget, bodyLimitBytes } = options;

  async function readHead(request: FastifyRequest<{ Params: McpParams }>, reply: FastifyReply) {
    const target = await resolveTarget(request);
    const row = await servers.find(target.workspaceId, request.params.server);
    if (!row)
      throw new JsonRpcRefusal(SERVER_ERROR, `No MCP server named "${request.params.server}" is registered.`, 404);
    const encoding = request.headers['content-encoding'];
    if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity')
      throw new JsonRpcRefusal(
        INVALID_REQUEST,
        'runguard reads a request to check it: send it without Content-Encoding.',
        415,
      );
    const reservation = new BodyReservation(budget, reply.raw);
    const declared = declaredLength(request.raw);
    if (declared !== null && declared <= bodyLimitBytes && !reservation.take(declared)) throw overloaded();
    request.mcpCall = { target, server: { name: row.name, url: new URL(row.url), headers: row.headers }, reservation };
  }

  const meterBody = async (request: FastifyRequest, _reply: FastifyReply, payload: NodeJS.ReadableStream) =>
    request.mcpCall && declaredLength(request.raw) === null
      ? meteredBody(payload, request.mcpCall.reservation)
      : payload;

  return { readHead, meterBody };
}

/** The session a request belongs to: its workspace, its server, and the session id the server gave. */
export function sessionKey(head: McpHead, headers: IncomingHttpHeaders): string {
  return `${head.target.workspaceId}\u0000${head.server.name}\u0000${String(headers['mcp-session-id'] ?? '')}`;
}
