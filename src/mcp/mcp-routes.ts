/* eslint-disable max-lines -- split with issue #50 */
/**
 * The MCP proxy: `/proxy/runs/{run_id}/mcp/{server}`, `/proxy/t/{token}/mcp/{server}` and
 * run-less `/mcp/{server}`, in front of the registered server's Streamable HTTP endpoint.
 * Everything of the transport passes through (POST with JSON or SSE answers, the GET stream,
 * DELETE, session and protocol headers, the agent's own Authorization). Each `tools/call` is a
 * TOOL_CALL step decided before it is forwarded (tool-step.ts); a denied one is answered with a
 * result the model reads (denied-result.ts); an allowed one is forwarded while its record commits,
 * its answer held until the record is durable, and its step finished when its response passes.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { FastifyError, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { request as undiciRequest, type Dispatcher } from 'undici';
import { toApiError } from '../api/error-handler.js';
import type { Clock } from '../clock.js';
import type { Metrics } from '../metrics.js';
import type { ApiKeyVerifier } from '../admin/api-key-verifier.js';
import type { GuardService } from '../guard/guard-service.js';
import type { Db } from '../store/db.js';
import type { ToolPolicy } from '../store/workspaces.js';
import { BodyBudget, BodyReservation, declaredLength, meteredBody, overloaded } from '../proxy/body-budget.js';
import type { CallsInProgress } from '../proxy/calls-in-progress.js';
import { resultRecorder, type CallStatus, type RecordResult } from '../proxy/call-result.js';
import { targetResolver, type Target } from '../proxy/call-target.js';
import { clientHeaders, forward, upstreamFailure, upstreamHeaders, type Upstream } from '../proxy/forwarder.js';
import { NO_TOKENS } from '../proxy/providers/index.js';
import { proxyTokenStore, type ProxyTokenStore } from '../proxy/proxy-tokens.js';
import { getWorkspace } from '../store/workspaces.js';
import type { OutboundPolicy } from '../webhooks/outbound-policy.js';
import { AnswerWatch } from './answer-watch.js';
import { deniedResult } from './denied-result.js';
import {
  cancelledRequest,
  errorMessage,
  idKey,
  INVALID_REQUEST,
  isRequest,
  JsonRpcRefusal,
  readPosted,
  SERVER_ERROR,
  toolCallOf,
  type JsonRpcMessage,
  type ToolCall,
} from './jsonrpc.js';
import type { McpServerRegistry } from './server-registry.js';
import { filteredToolList, listingPolicy } from './tool-list.js';
import { decideToolStep } from './tool-step.js';
import { mcpUpstreamAgent, type McpUpstreamOptions } from './upstream-agent.js';

export interface McpProxyOptions {
  /** Where MCP servers may be: loopback and private addresses only where allowed. */
  policy: OutboundPolicy;
  upstream?: McpUpstreamOptions;
  /** Largest JSON answer read for its tool responses, and largest SSE event. @default 4 MiB */
  maxAnswerBytes?: number;
}

interface McpParams {
  server: string;
  run_id?: string;
  token?: string;
}

/** What is known of an MCP request before its body is read. */
interface McpHead {
  target: Target;
  server: { name: string; url: URL; headers: Record<string, string> };
  reservation: BodyReservation;
}

declare module 'fastify' {
  interface FastifyRequest {
    mcpCall: McpHead | null;
  }
}

/** Answers of a session kept for the shape of a denial (JSON or SSE): enough for every live session. */
const SESSIONS_KEPT = 10_000;

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
  // eslint-disable-next-line max-lines-per-function -- a route declaration; split with issue #50
}> = async (app, deps) => {
  const { guard, db, servers, proxy, options, metrics, calls } = deps;
  const agent = mcpUpstreamAgent(options.policy, options.upstream);
  app.addHook('onClose', async () => agent.close());
  const maxAnswerBytes = options.maxAnswerBytes ?? 4 * 1024 * 1024;
  const budget = new BodyBudget(proxy.bodyBudgetBytes ?? 4 * proxy.bodyLimitBytes);
  const resolveTarget = targetResolver({
    keys: deps.keys,
    clock: deps.clock,
    tokens: deps.tokens ?? proxyTokenStore(db),
    get defaultApiKey() {
      return proxy.defaultApiKey;
    },
    defaultUserId: proxy.defaultUserId,
    runStartedBy: (workspaceId, runId, apiKeyId) => guard.runStartedBy(workspaceId, runId, apiKeyId),
  });
  /** Whether a session's answers come as SSE: a denial answers in the same shape. */
  const sessionShapes = new Map<string, boolean>();
  /** Allowed tool calls awaiting their response, by session and request id: a cancel ends them. */
  const pending = new Map<string, (status: CallStatus, outcome: Record<string, unknown>) => void>();

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
    if (declared !== null && declared <= proxy.bodyLimitBytes && !reservation.take(declared)) throw overloaded();
    request.mcpCall = { target, server: { name: row.name, url: new URL(row.url), headers: row.headers }, reservation };
  }

  const meterBody = async (request: FastifyRequest, _reply: FastifyReply, payload: NodeJS.ReadableStream) =>
    request.mcpCall && declaredLength(request.raw) === null
      ? meteredBody(payload, request.mcpCall.reservation)
      : payload;

  /** The request as it goes to the server: the client's headers, then the registered ones where the client sent none. */
  function outgoing(request: FastifyRequest, head: McpHead, body: Buffer | null) {
    const headers = upstreamHeaders(request.headers);
    for (const [name, value] of Object.entries(head.server.headers)) headers[name] ??= value;
    const upstream: Upstream = { origin: head.server.url.origin, basePath: '', pool: agent };
    const path = head.server.url.pathname + head.server.url.search;
    return { upstream, request: { method: request.method, path, headers, body } };
  }

  const sessionKey = (head: McpHead, headers: IncomingHttpHeaders) =>
    `${head.target.workspaceId}\u0000${head.server.name}\u0000${String(headers['mcp-session-id'] ?? '')}`;

  function rememberShape(key: string, contentType: unknown) {
    const sse = typeof contentType === 'string' && /^text\/event-stream/i.test(contentType);
    sessionShapes.delete(key);
    sessionShapes.set(key, sse);
    if (sessionShapes.size > SESSIONS_KEPT) sessionShapes.delete(sessionShapes.keys().next().value!);
  }

  /** Whether answers the sidecar writes itself go as SSE: as this session's last answer did, else as the client prefers. */
  function answersAsSse(key: string, request: FastifyRequest): boolean {
    const known = sessionShapes.get(key);
    if (known !== undefined) return known;
    return (
      !/application\/json/i.test(String(request.headers.accept ?? '')) &&
      /text\/event-stream/i.test(String(request.headers.accept ?? ''))
    );
  }

  function writeMessages(res: ServerResponse, sse: boolean, messages: JsonRpcMessage[], batch: boolean, status = 200) {
    if (sse) {
      res.writeHead(status, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.end(messages.map((message) => `event: message\ndata: ${JSON.stringify(message)}\n\n`).join(''));
      return;
    }
    const payload = JSON.stringify(batch ? messages : messages[0]);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
    res.end(payload);
  }

  /** The workspace's tool policy, when it has lists: tools/list answers are filtered by it. */
  async function toolPolicy(workspaceId: string): Promise<ToolPolicy | null> {
    return listingPolicy((await getWorkspace(db, workspaceId))?.tool_policy);
  }

  /** One tool call forwarded: its step's result recorded once, when its response passes or the exchange ends. */
  function trackedCall(head: McpHead, call: ToolCall, record: RecordResult, key: string) {
    const started = performance.now();
    const tool = `${head.server.name}.${call.tool}`.slice(0, 200);
    const pendingKey = `${key}\u0000${idKey(call.id)}`;
    let done = false;
    const finish = (status: CallStatus, outcome: Record<string, unknown>, notReached = false) => {
      if (done) return;
      done = true;
      pending.delete(pendingKey);
      record(status, NO_TOKENS, outcome, null, notReached);
      const label = status === 'COMPLETED' ? 'completed' : 'failed';
      metrics?.toolCalls.inc({ server: head.server.name, tool, outcome: label });
      metrics?.toolCallSeconds.observe(
        { server: head.server.name, outcome: label },
        (performance.now() - started) / 1000,
      );
    };
    pending.set(pendingKey, finish);
    return {
      id: call.id,
      finish,
      get done() {
        return done;
      },
    };
  }

  async function handlePost(request: FastifyRequest<{ Params: McpParams }>, reply: FastifyReply) {
    const head = request.mcpCall!;
    const body = (request.body as Buffer | undefined) ?? null;
    const posted = readPosted(body);
    const key = sessionKey(head, request.headers);
    // A cancelled tool call ends its step FAILED now; the notification goes on to the server.
    for (const message of posted.messages) {
      const cancelled = cancelledRequest(message);
      if (cancelled !== undefined) pending.get(`${key}\u0000${idKey(cancelled)}`)?.('FAILED', { error: 'CANCELLED' });
    }
    const toolCalls = posted.messages.map(toolCallOf).filter((call): call is ToolCall => call !== null);
    const listsTools = posted.messages.some((message) => isRequest(message) && message.method === 'tools/list');
    const policy = listsTools ? await toolPolicy(head.target.workspaceId) : null;
    if (toolCalls.length === 0 && !policy) {
      reply.hijack();
      relay(request, reply.raw, head, body, key, []);
      return;
    }

    // Each tool call decided in turn (a batch's too): denied ones are answered here, never forwarded.
    const denied: JsonRpcMessage[] = [];
    const allowed: { call: ToolCall; record: RecordResult; recorded: Promise<void> }[] = [];
    for (const call of toolCalls) {
      const decided = await decideToolStep(guard, head.target, head.server.name, call, request.log);
      if (!decided.allowed) {
        denied.push(deniedResult(call.id, decided.decision, decided.stepId));
        metrics?.toolCalls.inc({
          server: head.server.name,
          tool: `${head.server.name}.${call.tool}`.slice(0, 200),
          outcome: 'denied',
        });
        continue;
      }
      const record = resultRecorder(guard, calls, decided.step, decided.recorded, request.log);
      allowed.push({ call, record, recorded: decided.recorded });
    }
    const deniedIds = new Set(denied.map((message) => idKey(message.id!)));
    const forwarded = posted.messages.filter((message) => !(isRequest(message) && deniedIds.has(idKey(message.id))));
    const recorded = Promise.all(allowed.map((entry) => entry.recorded));
    const tracked = allowed.map((entry) => trackedCall(head, entry.call, entry.record, key));

    if (forwarded.length === 0) {
      reply.hijack();
      writeMessages(reply.raw, answersAsSse(key, request), denied, posted.batch);
      return;
    }
    if (denied.length === 0 && !policy) {
      // The common case: streamed through, held until every step's record is durable.
      const held = relay(request, reply.raw, head, body, key, tracked, true);
      try {
        await recorded;
      } catch (error) {
        held?.cancel(error as Error);
        for (const call of tracked) call.finish('FAILED', { error: 'NOT_RECORDED' }, true);
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
      for (const call of tracked) call.finish('FAILED', { error: 'NOT_RECORDED' }, true);
      throw error;
    }
    reply.hijack();
    await bufferedExchange(request, reply.raw, head, forwardedBody, key, tracked, denied, posted.batch, policy);
  }

  /** Forwards the request and streams the answer back, reading the tool calls' responses on the side. */
  function relay(
    request: FastifyRequest,
    res: ServerResponse,
    head: McpHead,
    body: Buffer | null,
    key: string,
    tracked: ReturnType<typeof trackedCall>[],
    held = false,
  ) {
    const byId = new Map(tracked.map((call) => [idKey(call.id), call]));
    const watch = new AnswerWatch((id, failed, error) => {
      byId.get(idKey(id))?.finish(failed ? 'FAILED' : 'COMPLETED', {
        ...(error ? { jsonrpc_error: error } : {}),
        ...(failed && !error ? { is_error: true } : {}),
      });
    }, maxAnswerBytes);
    const endAll = (outcome: Record<string, unknown>, notReached = false) => {
      for (const call of tracked) call.finish('FAILED', outcome, notReached);
    };
    let httpStatus = 0;
    const { upstream, request: out } = outgoing(request, head, body);
    if (res.destroyed) {
      endAll({ error: 'CLIENT_ABORTED' }, true);
      return null;
    }
    return forward(
      upstream,
      out,
      res,
      {
        answered(statusCode, headers) {
          httpStatus = statusCode;
          if (request.method === 'POST') rememberShape(key, headers['content-type']);
          // Typed a string, but a repeated header may arrive as a list.
          const contentType = headers['content-type'] as string | string[] | undefined;
          watch.answered(Array.isArray(contentType) ? contentType[0] : contentType);
          return clientHeaders(headers);
        },
        chunk: (chunk) => watch.chunk(chunk),
        ended(end) {
          switch (end.kind) {
            case 'complete':
              watch.end();
              return endAll({ error: 'NO_RESPONSE', http_status: httpStatus });
            case 'client-left':
              return endAll({ error: 'CLIENT_ABORTED' });
            case 'upstream-broken':
              return endAll({ error: 'UPSTREAM_BROKEN' });
            case 'upstream-failed': {
              const failure = upstreamFailure(end.error);
              request.log.warn({ err: end.error, server: head.server.name }, 'MCP server request failed');
              const message = serverDown(head.server.name, failure.code, end.error);
              const ids = tracked.length > 0 ? tracked.map((call) => call.id) : [null];
              writeMessages(
                res,
                false,
                ids.map((id) => errorMessage(id, SERVER_ERROR, message)),
                tracked.length > 1,
                failure.status,
              );
              return endAll({ error: failure.code }, true);
            }
          }
        },
      },
      { held },
    );
  }

  /** Forwards, reads the whole answer, and writes it with the denied calls' results added and tools/list filtered. */
  // eslint-disable-next-line max-lines-per-function -- split with issue #50
  async function bufferedExchange(
    request: FastifyRequest,
    res: ServerResponse,
    head: McpHead,
    body: Buffer,
    key: string,
    tracked: ReturnType<typeof trackedCall>[],
    denied: JsonRpcMessage[],
    batch: boolean,
    policy: ToolPolicy | null,
  ) {
    const { request: out } = outgoing(request, head, body);
    out.headers['content-length'] = String(body.length);
    let answer: Dispatcher.ResponseData;
    try {
      answer = await undiciRequest(new URL(out.path, head.server.url.origin), {
        dispatcher: agent,
        method: 'POST',
        headers: out.headers,
        body,
      });
    } catch (error) {
      const failure = upstreamFailure(error);
      const message = serverDown(head.server.name, failure.code, error);
      const ids = [...tracked.map((call) => call.id)];
      writeMessages(
        res,
        false,
        [...ids.map((id) => errorMessage(id, SERVER_ERROR, message)), ...denied],
        batch,
        failure.status,
      );
      for (const call of tracked) call.finish('FAILED', { error: failure.code }, true);
      return;
    }
    const contentType = String(answer.headers['content-type'] ?? '');
    const sse = /^text\/event-stream/i.test(contentType);
    rememberShape(key, contentType);
    let text = '';
    try {
      for await (const chunk of answer.body) {
        text += (chunk as Buffer).toString('utf8');
        if (text.length > maxAnswerBytes) throw new Error('answer too large');
      }
    } catch (error) {
      request.log.warn({ err: error, server: head.server.name }, 'MCP server answer not read');
      res.destroy();
      for (const call of tracked) call.finish('FAILED', { error: 'UPSTREAM_BROKEN' });
      return;
    }
    const byId = new Map(tracked.map((call) => [idKey(call.id), call]));
    const rewrite = (message: unknown): unknown => {
      const response = message as JsonRpcMessage;
      if (
        response &&
        response.id !== undefined &&
        response.id !== null &&
        ('result' in response || 'error' in response)
      ) {
        const failed = 'error' in response || (response.result as { isError?: unknown } | null)?.isError === true;
        byId.get(idKey(response.id))?.finish(failed ? 'FAILED' : 'COMPLETED', failed ? { is_error: true } : {});
        if (policy) return filteredToolList(response, policy, head.server.name);
      }
      return message;
    };
    const headers = clientHeaders(answer.headers);
    delete headers['content-length'];
    if (sse) {
      const events = text.split(/\r?\n\r?\n/).filter((event) => event.trim() !== '');
      const rewritten = events.map((event) => {
        const lines = event.split(/\r?\n/);
        const data = lines.filter((line) => line.startsWith('data:')).map((line) => line.slice(5).replace(/^ /, ''));
        if (data.length === 0) return event;
        try {
          const message = rewrite(JSON.parse(data.join('\n')));
          return [...lines.filter((line) => !line.startsWith('data:')), `data: ${JSON.stringify(message)}`].join('\n');
        } catch {
          return event;
        }
      });
      const added = denied.map((message) => `event: message\ndata: ${JSON.stringify(message)}`);
      res.writeHead(answer.statusCode, headers);
      res.end([...rewritten, ...added].map((event) => `${event}\n\n`).join(''));
    } else {
      let payload = text;
      try {
        const parsed: unknown = text === '' ? null : JSON.parse(text);
        const messages = parsed === null ? [] : Array.isArray(parsed) ? parsed.map(rewrite) : [rewrite(parsed)];
        const all = [...messages, ...denied];
        if (all.length > 0) payload = JSON.stringify(batch || all.length > 1 ? all : all[0]);
        if (answer.statusCode === 202 && denied.length > 0) answer.statusCode = 200;
        headers['content-type'] = 'application/json';
      } catch {
        /* not JSON: relayed as it came */
      }
      headers['content-length'] = String(Buffer.byteLength(payload));
      res.writeHead(answer.statusCode, headers);
      res.end(payload);
    }
    for (const call of tracked) call.finish('FAILED', { error: 'NO_RESPONSE', http_status: answer.statusCode });
  }

  async function handleOther(request: FastifyRequest<{ Params: McpParams }>, reply: FastifyReply) {
    const head = request.mcpCall!;
    reply.hijack();
    relay(request, reply.raw, head, null, sessionKey(head, request.headers), []);
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

/** The agent's error when the server could not be reached: it names the server. */
function serverDown(server: string, code: string, error: unknown): string {
  const why = code === 'UPSTREAM_TIMEOUT' ? 'did not answer in time' : 'could not be reached';
  const refused = (error as { name?: string })?.name === 'OutboundRefused' ? `: ${(error as Error).message}` : '';
  return `The MCP server "${server}" ${why}${refused}.`;
}
