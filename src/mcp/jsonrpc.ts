/**
 * JSON-RPC 2.0 as MCP speaks it: reading what a client posts (one message, or a batch), finding
 * its tool calls, and the messages the sidecar writes itself (errors, a denied call's result).
 * Pure: no I/O.
 */
import { MAX_BODY_DEPTH, nestsDeeperThan } from '../proxy/json-fields.js';

export type JsonRpcId = string | number;

export interface JsonRpcMessage {
  jsonrpc: '2.0';
  id?: JsonRpcId | null;
  method?: string;
  params?: unknown;
  result?: unknown;
  error?: { code: number; message: string; data?: unknown };
}

/** Standard JSON-RPC error codes. */
export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;
/** MCP servers answer a failed request with this implementation-defined code; so does the sidecar. */
export const SERVER_ERROR = -32000;

/** What a client posted: its messages, and whether they came as a batch (answered as one). */
export interface Posted {
  messages: JsonRpcMessage[];
  batch: boolean;
}

/** Why a body is not JSON-RPC: the error code and the sentence for the client. */
export class JsonRpcRefusal extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly httpStatus: number = 400,
    readonly id: JsonRpcId | null = null,
  ) {
    super(message);
  }
}

const isId = (value: unknown): value is JsonRpcId =>
  typeof value === 'string' || (typeof value === 'number' && Number.isFinite(value));

function isMessage(value: unknown): value is JsonRpcMessage {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const message = value as Record<string, unknown>;
  if (message.jsonrpc !== '2.0') return false;
  if (message.id !== undefined && message.id !== null && !isId(message.id)) return false;
  if (typeof message.method === 'string') return true;
  // A response (to a server's request): an id, and a result or an error.
  return isId(message.id) && ('result' in message || 'error' in message);
}

/** Reads a POST body; throws a JsonRpcRefusal (parse error, invalid request) when it is not JSON-RPC. */
export function readPosted(body: Buffer | null): Posted {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body?.toString('utf8') ?? '');
  } catch {
    throw new JsonRpcRefusal(PARSE_ERROR, 'Parse error: the body is not JSON.');
  }
  // A tool call's arguments are hashed for the loop rule and serialised for the record, both
  // recursively: a body thousands of levels deep would overflow the stack.
  if (nestsDeeperThan(parsed, MAX_BODY_DEPTH))
    throw new JsonRpcRefusal(INVALID_REQUEST, `Invalid Request: the body nests deeper than ${MAX_BODY_DEPTH} levels.`);
  const batch = Array.isArray(parsed);
  const messages = batch ? (parsed as unknown[]) : [parsed];
  if (messages.length === 0) throw new JsonRpcRefusal(INVALID_REQUEST, 'Invalid Request: an empty batch.');
  for (const message of messages) {
    if (!isMessage(message)) {
      const id = typeof message === 'object' && message !== null ? (message as { id?: unknown }).id : undefined;
      throw new JsonRpcRefusal(
        INVALID_REQUEST,
        'Invalid Request: not a JSON-RPC 2.0 message (jsonrpc "2.0" with a method, or a response).',
        400,
        isId(id) ? id : null,
      );
    }
  }
  return { messages: messages as JsonRpcMessage[], batch };
}

/** A request the client expects an answer to (not a notification, not a response). */
export const isRequest = (message: JsonRpcMessage): message is JsonRpcMessage & { id: JsonRpcId; method: string } =>
  typeof message.method === 'string' && isId(message.id);

/** A `tools/call` request: the tool's name and arguments as the client sent them. */
export interface ToolCall {
  id: JsonRpcId;
  tool: string;
  arguments: Record<string, unknown> | null;
}

export function toolCallOf(message: JsonRpcMessage): ToolCall | null {
  if (!isRequest(message) || message.method !== 'tools/call') return null;
  const params = (message.params ?? {}) as { name?: unknown; arguments?: unknown };
  const args = params.arguments;
  return {
    id: message.id,
    tool: typeof params.name === 'string' ? params.name : '',
    arguments:
      typeof args === 'object' && args !== null && !Array.isArray(args) ? (args as Record<string, unknown>) : null,
  };
}

/** The request id a `notifications/cancelled` names; undefined for any other message. */
export function cancelledRequest(message: JsonRpcMessage): JsonRpcId | undefined {
  if (message.method !== 'notifications/cancelled') return undefined;
  const requestId = (message.params as { requestId?: unknown } | undefined)?.requestId;
  return isId(requestId) ? requestId : undefined;
}

export function errorMessage(id: JsonRpcId | null, code: number, message: string): JsonRpcMessage {
  return { jsonrpc: '2.0', id, error: { code, message } };
}

/** A message's key for matching a response to its request: ids 1 and "1" are different requests. */
export const idKey = (id: JsonRpcId): string => `${typeof id}:${String(id)}`;

/** A response (result or error) in a message the server sent; null for anything else. */
export function responseOf(value: unknown): { id: JsonRpcId; failed: boolean } | null {
  if (typeof value !== 'object' || value === null) return null;
  const message = value as Record<string, unknown>;
  if (!isId(message.id) || typeof message.method === 'string') return null;
  if ('error' in message) return { id: message.id, failed: true };
  if (!('result' in message)) return null;
  const result = message.result as { isError?: unknown } | null;
  return { id: message.id, failed: typeof result === 'object' && result !== null && result.isError === true };
}
