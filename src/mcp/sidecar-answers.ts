/**
 * Answers the sidecar writes itself (denied calls' results, errors), in the shape the session's
 * answers take: SSE or JSON, as the server's last answer in that session, else as the client
 * prefers.
 */
import type { ServerResponse } from 'node:http';
import type { JsonRpcMessage } from './jsonrpc.js';

/** Sessions whose shape is kept: enough for every live session. */
const SESSIONS_KEPT = 10_000;

/** Whether each session's answers come as SSE, by session (sessionKey in mcp-head.ts). */
export class SessionShapes {
  /** The session answered longest ago first: the first forgotten. */
  private readonly sse = new Map<string, boolean>();

  /** The server answered in the session with this content type. */
  remember(session: string, contentType: unknown): void {
    const sse = typeof contentType === 'string' && /^text\/event-stream/i.test(contentType);
    this.sse.delete(session);
    this.sse.set(session, sse);
    if (this.sse.size > SESSIONS_KEPT) this.sse.delete(this.sse.keys().next().value!);
  }

  /** Whether an answer the sidecar writes in the session goes as SSE, given the client's Accept header. */
  answersAsSse(session: string, accept: string | undefined): boolean {
    const known = this.sse.get(session);
    if (known !== undefined) return known;
    return !/application\/json/i.test(String(accept ?? '')) && /text\/event-stream/i.test(String(accept ?? ''));
  }
}

/** Writes whole messages as the answer: SSE events, or JSON (a batch as an array). */
export function writeMessages(
  res: ServerResponse,
  sse: boolean,
  messages: JsonRpcMessage[],
  batch: boolean,
  status = 200,
): void {
  if (sse) {
    res.writeHead(status, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.end(messages.map((message) => `event: message\ndata: ${JSON.stringify(message)}\n\n`).join(''));
    return;
  }
  const payload = JSON.stringify(batch ? messages : messages[0]);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) });
  res.end(payload);
}

/** The agent's error when the server could not be reached: it names the server. */
export function serverDown(server: string, code: string, error: unknown): string {
  const why = code === 'UPSTREAM_TIMEOUT' ? 'did not answer in time' : 'could not be reached';
  const refused = (error as { name?: string })?.name === 'OutboundRefused' ? `: ${(error as Error).message}` : '';
  return `The MCP server "${server}" ${why}${refused}.`;
}
