/**
 * The MCP proxy: `/proxy/runs/{run_id}/mcp/{server}`, `/proxy/t/{token}/mcp/{server}` and
 * run-less `/mcp/{server}`, in front of the registered server's Streamable HTTP endpoint.
 * Everything of the transport passes through (POST with JSON or SSE answers, the GET stream,
 * DELETE, session and protocol headers, the agent's own Authorization). Each post reads as: the
 * server and target from the request line and headers (mcp-head.ts), each `tools/call` a
 * TOOL_CALL step decided before it is forwarded (tool-step.ts), a denied one answered with a result
 * the model reads (denied-result.ts); an allowed one forwarded while its record commits, its answer
 * held until the record is durable (streamed-exchange.ts), and its step finished when its response
 * passes (tool-calls-in-flight.ts). A post with denied calls or a tools/list to filter is read
 * whole and rewritten (buffered-exchange.ts).
 */
import type { FastifyError, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { toApiError } from '../api/error-handler.js';
import type { Clock } from '../clock.js';
import type { Metrics } from '../metrics.js';
import type { ApiKeyVerifier } from '../admin/api-key-verifier.js';
import type { GuardService } from '../guard/guard-service.js';
import type { Db } from '../store/db.js';
import type { ToolPolicy } from '../store/workspaces.js';
import { BodyBudget } from '../proxy/body-budget.js';
import type { CallsInProgress } from '../proxy/calls-in-progress.js';
import { resultRecorder, type RecordResult } from '../proxy/call-result.js';
import { targetResolver } from '../proxy/call-target.js';
import { proxyTokenStore, type ProxyTokenStore } from '../proxy/proxy-tokens.js';
import { getWorkspace } from '../store/workspaces.js';
import type { OutboundPolicy } from '../webhooks/outbound-policy.js';
import { bufferedExchange } from './buffered-exchange.js';
import { deniedResult } from './denied-result.js';
import type { Exchange, ExchangeContext } from './exchange.js';
import {
  cancelledRequest,
  errorMessage,
  idKey,
  isRequest,
  JsonRpcRefusal,
  readPosted,
  SERVER_ERROR,
  toolCallOf,
  type JsonRpcMessage,
  type ToolCall,
} from './jsonrpc.js';
import { mcpHeadHooks, sessionKey, type McpHead, type McpParams } from './mcp-head.js';
import type { McpServerRegistry } from './server-registry.js';
import { SessionShapes, writeMessages } from './sidecar-answers.js';
import { streamExchange } from './streamed-exchange.js';
import { ToolCallsInFlight } from './tool-calls-in-flight.js';
import { listingPolicy } from './tool-list.js';
import { decideToolStep } from './tool-step.js';
import { mcpUpstreamAgent, type McpUpstreamOptions } from './upstream-agent.js';

export interface McpProxyOptions {
  /** Where MCP servers may be: loopback and private addresses only where allowed. */
  policy: OutboundPolicy;
  upstream?: McpUpstreamOptions;
  /** Largest JSON answer read for its tool responses, and largest SSE event. @default 4 MiB */
  maxAnswerBytes?: number;
}

export const mcpProxyRoutes: FastifyPluginAsync<{
  guard: GuardService;
  db: Db;
  keys: ApiKeyVerifier;
  clock: Clock;
  servers: McpServerRegistry;
  proxy: {
    defaultApiKey: string | null;
    defaultUserId: string | null;
    bodyLimitBytes: number;
    bodyBudgetBytes?: number;
  };
  options: McpProxyOptions;
  metrics: Metrics | null;
  calls: CallsInProgress;
  tokens?: ProxyTokenStore;
  // eslint-disable-next-line max-lines-per-function -- a route declaration, as src/api/routes/
}> = async (app, deps) => {
  const { guard, db, proxy, options, calls } = deps;
  const agent = mcpUpstreamAgent(options.policy, options.upstream);
  app.addHook('onClose', async () => agent.close());
  const context: ExchangeContext = {
    agent,
    maxAnswerBytes: options.maxAnswerBytes ?? 4 * 1024 * 1024,
    shapes: new SessionShapes(),
  };
  const inFlight = new ToolCallsInFlight(deps.metrics);
  const { readHead, meterBody } = mcpHeadHooks({
    resolveTarget: targetResolver({
      keys: deps.keys,
      clock: deps.clock,
      tokens: deps.tokens ?? proxyTokenStore(db),
      get defaultApiKey() {
        return proxy.defaultApiKey;
      },
      defaultUserId: proxy.defaultUserId,
      runStartedBy: (workspaceId, runId, apiKeyId) => guard.runStartedBy(workspaceId, runId, apiKeyId),
    }),
    servers: deps.servers,
    budget: new BodyBudget(proxy.bodyBudgetBytes ?? 4 * proxy.bodyLimitBytes),
    bodyLimitBytes: proxy.bodyLimitBytes,
  });

  app.decorateRequest('mcpCall', null);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: proxy.bodyLimitBytes }, (_req, body, done) => {
    done(null, body);
  });

  // Every refusal in JSON-RPC form, so an MCP client reads it as the server's error.
  app.setErrorHandler((error: FastifyError | JsonRpcRefusal, request, reply) => {
    if (error instanceof JsonRpcRefusal) {
      return reply.status(error.httpStatus).send(errorMessage(error.id, error.code, error.message));
    }
    const apiError = toApiError(error);
    if (apiError.statusCode >= 500 && apiError.code !== 'OVERLOADED')
      request.log.error({ err: error }, 'MCP request failed');
    const body = errorMessage(null, SERVER_ERROR, apiError.message);
    body.error!.data = { code: apiError.code };
    return reply.status(apiError.statusCode).send(body);
  });

  /** The workspace's tool policy, when it has lists: tools/list answers are filtered by it. */
  async function toolPolicy(workspaceId: string): Promise<ToolPolicy | null> {
    return listingPolicy((await getWorkspace(db, workspaceId))?.tool_policy);
  }

  /** Each tool call decided in turn (a batch's too): denied ones are answered here, never forwarded. */
  async function decideToolCalls(request: FastifyRequest, head: McpHead, toolCalls: ToolCall[], session: string) {
    const denied: JsonRpcMessage[] = [];
    const allowed: { call: ToolCall; recorded: Promise<void>; record: RecordResult }[] = [];
    for (const call of toolCalls) {
      const decided = await decideToolStep(guard, head.target, head.server.name, call, request.log);
      if (!decided.allowed) {
        denied.push(deniedResult(call.id, decided.decision, decided.stepId));
        inFlight.denied(head.server.name, call);
        continue;
      }
      const record = resultRecorder(guard, calls, decided.step, decided.recorded, request.log);
      allowed.push({ call, recorded: decided.recorded, record });
    }
    const tracked = allowed.map((entry) => inFlight.track(session, head.server.name, entry.call, entry.record));
    return { denied, tracked, recorded: Promise.all(allowed.map((entry) => entry.recorded)) };
  }

  async function handlePost(request: FastifyRequest<{ Params: McpParams }>, reply: FastifyReply) {
    const head = request.mcpCall!;
    const body = (request.body as Buffer | undefined) ?? null;
    const posted = readPosted(body);
    const session = sessionKey(head, request.headers);
    // A cancelled tool call ends its step FAILED now; the notification goes on to the server.
    for (const message of posted.messages) {
      const cancelled = cancelledRequest(message);
      if (cancelled !== undefined) inFlight.cancel(session, cancelled);
    }
    const toolCalls = posted.messages.map(toolCallOf).filter((call): call is ToolCall => call !== null);
    const listsTools = posted.messages.some((message) => isRequest(message) && message.method === 'tools/list');
    const policy = listsTools ? await toolPolicy(head.target.workspaceId) : null;
    if (toolCalls.length === 0 && !policy) {
      reply.hijack();
      streamExchange(context, { request, res: reply.raw, head, session, tracked: [] }, body);
      return;
    }

    const { denied, tracked, recorded } = await decideToolCalls(request, head, toolCalls, session);
    const deniedIds = new Set(denied.map((message) => idKey(message.id!)));
    const forwarded = posted.messages.filter((message) => !(isRequest(message) && deniedIds.has(idKey(message.id))));
    const exchange: Exchange = { request, res: reply.raw, head, session, tracked };
    const notRecorded = () => {
      for (const call of tracked) call.finish('FAILED', { error: 'NOT_RECORDED' }, true);
    };
    if (forwarded.length === 0) {
      reply.hijack();
      writeMessages(reply.raw, context.shapes.answersAsSse(session, request.headers.accept), denied, posted.batch);
      return;
    }
    if (denied.length === 0 && !policy) {
      // The common case: streamed through, held until every step's record is durable.
      const held = streamExchange(context, exchange, body, true);
      try {
        await recorded;
      } catch (error) {
        held?.cancel(error as Error);
        notRecorded();
        throw error;
      }
      reply.hijack();
      held?.release();
      return;
    }
    // A batch with denied calls, or a tools/list to filter: the answer is read whole, then written.
    const forwardedBody = Buffer.from(JSON.stringify(posted.batch ? forwarded : forwarded[0]));
    try {
      await recorded;
    } catch (error) {
      notRecorded();
      throw error;
    }
    reply.hijack();
    await bufferedExchange(context, exchange, forwardedBody, { denied, batch: posted.batch, policy });
  }

  async function handleOther(request: FastifyRequest<{ Params: McpParams }>, reply: FastifyReply) {
    const head = request.mcpCall!;
    reply.hijack();
    streamExchange(
      context,
      { request, res: reply.raw, head, session: sessionKey(head, request.headers), tracked: [] },
      null,
    );
  }

  for (const pattern of ['/proxy/runs/:run_id/mcp/:server', '/proxy/t/:token/mcp/:server', '/mcp/:server']) {
    const hooks = {
      config: { auth: 'none' as const },
      schema: { hide: true },
      onRequest: readHead,
      preParsing: meterBody,
    };
    app.post<{ Params: McpParams }>(pattern, hooks, handlePost);
    app.get<{ Params: McpParams }>(pattern, hooks, handleOther);
    app.delete<{ Params: McpParams }>(pattern, hooks, handleOther);
  }
};
