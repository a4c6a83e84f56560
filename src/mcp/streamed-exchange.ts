/**
 * An exchange streamed through: the request forwarded as the client sent it, the answer relayed as
 * it comes while the tool calls' responses are read on the side (answer-watch.ts), each call's step
 * finished when its response passes. Held, the answer waits until released (once the calls'
 * records are durable) or is dropped.
 */
import { clientHeaders, forward, upstreamFailure, type HeldAnswer, type RelayEnd } from '../proxy/forwarder.js';
import { AnswerWatch } from './answer-watch.js';
import { outgoing, type Exchange, type ExchangeContext } from './exchange.js';
import { errorMessage, idKey, SERVER_ERROR } from './jsonrpc.js';
import { serverDown, writeMessages } from './sidecar-answers.js';

/** Forwards the request and streams the answer back; null when the client has already gone. */
export function streamExchange(
  context: ExchangeContext,
  exchange: Exchange,
  body: Buffer | null,
  held = false,
): HeldAnswer | null {
  const { request, tracked } = exchange;
  const byId = new Map(tracked.map((call) => [idKey(call.id), call]));
  const watch = new AnswerWatch((id, failed, error) => {
    byId.get(idKey(id))?.finish(failed ? 'FAILED' : 'COMPLETED', {
      ...(error ? { jsonrpc_error: error } : {}),
      ...(failed && !error ? { is_error: true } : {}),
    });
  }, context.maxAnswerBytes);
  let httpStatus = 0;
  const { upstream, request: out } = outgoing(context, exchange, body);
  if (exchange.res.destroyed) {
    endAll(exchange, { error: 'CLIENT_ABORTED' }, true);
    return null;
  }
  return forward(
    upstream,
    out,
    exchange.res,
    {
      answered(statusCode, headers) {
        httpStatus = statusCode;
        if (request.method === 'POST') context.shapes.remember(exchange.session, headers['content-type']);
        // Typed a string, but a repeated header may arrive as a list.
        const contentType = headers['content-type'] as string | string[] | undefined;
        watch.answered(Array.isArray(contentType) ? contentType[0] : contentType);
        return clientHeaders(headers);
      },
      chunk: (chunk) => watch.chunk(chunk),
      ended(end) {
        if (end.kind === 'complete') watch.end();
        relayEnded(exchange, end, httpStatus);
      },
    },
    { held },
  );
}

/** How the relay ended finishes the calls whose responses did not pass; a server not reached is answered. */
function relayEnded(exchange: Exchange, end: RelayEnd, httpStatus: number): void {
  switch (end.kind) {
    case 'complete':
      return endAll(exchange, { error: 'NO_RESPONSE', http_status: httpStatus });
    case 'client-left':
      return endAll(exchange, { error: 'CLIENT_ABORTED' });
    case 'upstream-broken':
      return endAll(exchange, { error: 'UPSTREAM_BROKEN' });
    case 'upstream-failed': {
      const { request, head, tracked } = exchange;
      const failure = upstreamFailure(end.error);
      request.log.warn({ err: end.error, server: head.server.name }, 'MCP server request failed');
      const message = serverDown(head.server.name, failure.code, end.error);
      const ids = tracked.length > 0 ? tracked.map((call) => call.id) : [null];
      writeMessages(
        exchange.res,
        false,
        ids.map((id) => errorMessage(id, SERVER_ERROR, message)),
        tracked.length > 1,
        failure.status,
      );
      return endAll(exchange, { error: failure.code }, true);
    }
  }
}

/** Finishes every call of the exchange still in flight, FAILED with `outcome`. */
function endAll(exchange: Exchange, outcome: Record<string, unknown>, notReached = false): void {
  for (const call of exchange.tracked) call.finish('FAILED', outcome, notReached);
}
