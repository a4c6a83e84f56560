/**
 * An exchange with an MCP server: the client's request and where its answer goes, the tool calls
 * it carries, what every exchange shares, and the request as it goes to the server. It is either
 * streamed through (streamed-exchange.ts) or read whole and rewritten (buffered-exchange.ts).
 */
import type { ServerResponse } from 'node:http';
import type { FastifyRequest } from 'fastify';
import type { Dispatcher } from 'undici';
import { upstreamHeaders, type ForwardRequest, type Upstream } from '../proxy/forwarder.js';
import type { McpHead } from './mcp-head.js';
import type { SessionShapes } from './sidecar-answers.js';
import type { TrackedCall } from './tool-calls-in-flight.js';

/** What every exchange shares. */
export interface ExchangeContext {
  /** The connections to MCP servers (upstream-agent.ts). */
  agent: Dispatcher;
  /** Largest JSON answer read for its tool responses, and largest SSE event. */
  maxAnswerBytes: number;
  shapes: SessionShapes;
}

export interface Exchange {
  request: FastifyRequest;
  res: ServerResponse;
  head: McpHead;
  /** sessionKey of the request. */
  session: string;
  /** The tool calls it forwards, each finished when its response passes or the exchange ends. */
  tracked: TrackedCall[];
}

/** The request as it goes to the server: the client's headers, then the registered ones where the client sent none. */
export function outgoing(
  context: ExchangeContext,
  exchange: Exchange,
  body: Buffer | null,
): { upstream: Upstream; request: ForwardRequest } {
  const { request, head } = exchange;
  const headers = upstreamHeaders(request.headers);
  for (const [name, value] of Object.entries(head.server.headers)) headers[name] ??= value;
  const upstream: Upstream = { origin: head.server.url.origin, basePath: '', pool: context.agent };
  const path = head.server.url.pathname + head.server.url.search;
  return { upstream, request: { method: request.method, path, headers, body } };
}
