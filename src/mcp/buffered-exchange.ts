/**
 * An exchange read whole, then written: for a post in which some tool calls were denied (their
 * results are added to the server's answer), or a tools/list whose answer the tool policy filters.
 * Each call's step finishes as its response is read.
 */
import { request as undiciRequest, type Dispatcher } from 'undici';
import { clientHeaders, upstreamFailure } from '../proxy/forwarder.js';
import type { ToolPolicy } from '../store/workspaces.js';
import { outgoing, type Exchange, type ExchangeContext } from './exchange.js';
import { errorMessage, idKey, SERVER_ERROR, type JsonRpcMessage } from './jsonrpc.js';
import { serverDown, writeMessages } from './sidecar-answers.js';
import { filteredToolList } from './tool-list.js';

/** What the sidecar changes in the answer: the denied calls' results, a tools/list's policy; and whether it answers a batch. */
export interface AnswerChanges {
  denied: JsonRpcMessage[];
  batch: boolean;
  policy: ToolPolicy | null;
}

/** A message of the answer, as the client gets it. */
type Rewrite = (message: unknown) => unknown;

/** Forwards, reads the whole answer, and writes it with the denied calls' results added and tools/list filtered. */
export async function bufferedExchange(
  context: ExchangeContext,
  exchange: Exchange,
  body: Buffer,
  changes: AnswerChanges,
): Promise<void> {
  const { request, head, tracked } = exchange;
  const { request: out } = outgoing(context, exchange, body);
  out.headers['content-length'] = String(body.length);
  // The client leaving (or cut by a shutdown) calls the exchange off, as `forward` does: else a
  // server that never answers holds it, and the daemon's close, until its headers time out.
  const clientLeft = new AbortController();
  exchange.res.once('close', () => clientLeft.abort(new Error('the client left')));
  let answer: Dispatcher.ResponseData;
  try {
    answer = await undiciRequest(new URL(out.path, head.server.url.origin), {
      dispatcher: context.agent,
      method: 'POST',
      headers: out.headers,
      body,
      signal: clientLeft.signal,
    });
  } catch (error) {
    if (!clientLeft.signal.aborted) return serverNotReached(exchange, error, changes);
    for (const call of tracked) call.finish('FAILED', { error: 'CLIENT_ABORTED' });
    return;
  }
  const contentType = String(answer.headers['content-type'] ?? '');
  context.shapes.remember(exchange.session, contentType);
  const text = await readWhole(answer, context.maxAnswerBytes).catch((error: unknown) => {
    const left = clientLeft.signal.aborted;
    if (!left) request.log.warn({ err: error, server: head.server.name }, 'MCP server answer not read');
    exchange.res.destroy();
    for (const call of tracked) call.finish('FAILED', { error: left ? 'CLIENT_ABORTED' : 'UPSTREAM_BROKEN' });
    return null;
  });
  if (text === null) return;
  const status = writeChanged(exchange, answer, text, /^text\/event-stream/i.test(contentType), changes);
  for (const call of tracked) call.finish('FAILED', { error: 'NO_RESPONSE', http_status: status });
}

/** The server was not reached: each forwarded call answered with an error naming it, beside the denied calls' results. */
function serverNotReached(exchange: Exchange, error: unknown, changes: AnswerChanges): void {
  const failure = upstreamFailure(error);
  const message = serverDown(exchange.head.server.name, failure.code, error);
  const errors = exchange.tracked.map((call) => errorMessage(call.id, SERVER_ERROR, message));
  writeMessages(exchange.res, false, [...errors, ...changes.denied], changes.batch, failure.status);
  for (const call of exchange.tracked) call.finish('FAILED', { error: failure.code }, true);
}

async function readWhole(answer: Dispatcher.ResponseData, maxBytes: number): Promise<string> {
  let text = '';
  for await (const chunk of answer.body) {
    text += (chunk as Buffer).toString('utf8');
    if (text.length > maxBytes) throw new Error('answer too large');
  }
  return text;
}

/** Writes the answer with its changes (as it came when it is not JSON); answers the status written. */
function writeChanged(
  exchange: Exchange,
  answer: Dispatcher.ResponseData,
  text: string,
  sse: boolean,
  changes: AnswerChanges,
): number {
  const rewrite = responseRewrite(exchange, changes.policy);
  const headers = clientHeaders(answer.headers);
  delete headers['content-length'];
  let status = answer.statusCode;
  let payload = text;
  if (sse) {
    payload = changedEvents(text, rewrite, changes.denied);
  } else {
    const json = changedJson(text, rewrite, changes);
    if (json !== null) {
      payload = json;
      // Accepted (a notification's answer) but now carrying results.
      if (status === 202 && changes.denied.length > 0) status = 200;
      headers['content-type'] = 'application/json';
    }
    headers['content-length'] = String(Buffer.byteLength(payload));
  }
  exchange.res.writeHead(status, headers);
  exchange.res.end(payload);
  return status;
}

/** Each response read finishes its call's step; a tools/list answer loses what the policy refuses. */
function responseRewrite(exchange: Exchange, policy: ToolPolicy | null): Rewrite {
  const byId = new Map(exchange.tracked.map((call) => [idKey(call.id), call]));
  return (message) => {
    const response = message as JsonRpcMessage;
    if (
      response &&
      response.id !== undefined &&
      response.id !== null &&
      ('result' in response || 'error' in response)
    ) {
      const failed = 'error' in response || (response.result as { isError?: unknown } | null)?.isError === true;
      byId.get(idKey(response.id))?.finish(failed ? 'FAILED' : 'COMPLETED', failed ? { is_error: true } : {});
      if (policy) return filteredToolList(response, policy, exchange.head.server.name);
    }
    return message;
  };
}

/** An SSE answer's events, each message rewritten, then the denied calls' results as events of their own. */
function changedEvents(text: string, rewrite: Rewrite, denied: JsonRpcMessage[]): string {
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
  return [...rewritten, ...added].map((event) => `${event}\n\n`).join('');
}

/** A JSON answer's messages rewritten, with the denied calls' results; null when it is not JSON. */
function changedJson(text: string, rewrite: Rewrite, changes: AnswerChanges): string | null {
  let parsed: unknown;
  try {
    parsed = text === '' ? null : JSON.parse(text);
  } catch {
    return null;
  }
  const messages = parsed === null ? [] : Array.isArray(parsed) ? parsed.map(rewrite) : [rewrite(parsed)];
  const all = [...messages, ...changes.denied];
  return all.length > 0 ? JSON.stringify(changes.batch || all.length > 1 ? all : all[0]) : text;
}
