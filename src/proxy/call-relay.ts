/**
 * Forwarding an allowed call and relaying its answer: the answer's headers gain the daemon's
 * own, its bytes go to the client as they come while the provider's usage is read on the side,
 * and how the relay ended becomes the call's result (status, usage, outcome). The answer is held
 * until the caller releases it (once the call's record is durable), or dropped if it cancels.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import { formatOverheadMs, OVERHEAD_HEADER, type ProxyCallTimer } from '../metrics.js';
import {
  clientHeaders,
  forward,
  upstreamFailure,
  upstreamHeaders,
  type HeldAnswer,
  type RelayHooks,
} from './forwarder.js';
import type { Provider } from './provider-registry.js';
import { NO_TOKENS, type TokenFields, type UsageTracker } from './providers/index.js';
import type { CallStatus, RecordResult } from './call-result.js';

/** One forwarded call: the request to send, where its answer goes, and its step's id. */
export interface RelayedCall {
  request: { id: string; method: string; headers: IncomingHttpHeaders; log: FastifyBaseLogger };
  res: ServerResponse;
  provider: Provider;
  path: string;
  body: Buffer | null;
  stepId: string;
  timer: ProxyCallTimer;
}

/** The client's headers of an upstream answer: the provider's own, and the daemon's ids and overhead. */
export function answerHeaders(
  upstream: IncomingHttpHeaders,
  ids: { stepId: string; requestId: string },
  overheadMs: number,
): Record<string, string | string[]> {
  const headers = clientHeaders(upstream);
  headers['x-runguard-step-id'] = ids.stepId;
  // The daemon's id of the call (its log's key) goes under a name of its own: the provider's
  // `x-request-id`, which its support asks for and its SDK reads, is the client's to keep.
  headers['x-runguard-request-id'] = ids.requestId;
  headers['x-request-id'] ??= ids.requestId;
  // The sidecar's own time on this call until the upstream answered: guard checks and records.
  headers[OVERHEAD_HEADER] = formatOverheadMs(overheadMs);
  return headers;
}

/**
 * Forwards `call`, its answer held until released; `recordResult` is told once how the call
 * ended. Null when the client left before anything was sent.
 */
export function relayCall(call: RelayedCall, recordResult: RecordResult): HeldAnswer | null {
  const { request, res, provider, path, stepId, timer } = call;
  let tracker: UsageTracker | null = null;
  const finish = (status: CallStatus, usage: TokenFields, outcome: Record<string, unknown>) => {
    timer.finish(status === 'COMPLETED' ? 'ok' : outcome.error === 'CLIENT_ABORTED' ? 'aborted' : 'error');
    recordResult(status, usage, outcome, tracker?.model() ?? null);
  };
  if (res.destroyed || !res.socket || res.socket.destroyed) {
    // The client left while the step was being checked: nothing is sent upstream.
    finish('FAILED', NO_TOKENS, { error: 'CLIENT_ABORTED' });
    return null;
  }

  const outcome: Record<string, unknown> = {};
  timer.upstreamStarted();
  const upstreamRequest = { method: request.method, path, headers: upstreamHeaders(request.headers), body: call.body };
  const hooks: RelayHooks = {
    answered(statusCode, upstream) {
      const headers = answerHeaders(upstream, { stepId, requestId: request.id }, timer.overheadMs());
      // Typed a string, but a repeated header may arrive as a list.
      const contentType = upstream['content-type'] as string | string[] | undefined;
      tracker = provider.adapter.usageTracker(path, Array.isArray(contentType) ? contentType[0] : contentType);
      outcome.http_status = statusCode;
      const requestId = upstream['x-request-id'] ?? upstream['request-id'];
      if (typeof requestId === 'string') outcome.upstream_request_id = requestId.slice(0, 128);
      return headers;
    },
    chunk: (chunk) => tracker!.push(chunk),
    ended(end) {
      switch (end.kind) {
        case 'complete': {
          const ok = (outcome.http_status as number) >= 200 && (outcome.http_status as number) < 300;
          const usage = tracker!.end();
          // A stream that carried an error event failed, whatever its status said: its SDK raised.
          if (ok && tracker!.streamFailed())
            return finish('FAILED', usage, { ...outcome, error: 'UPSTREAM_STREAM_ERROR' });
          return finish(ok ? 'COMPLETED' : 'FAILED', usage, outcome);
        }
        // A cut stream: what was read before the cut (an SSE stream's usage so far).
        case 'client-left':
          return finish('FAILED', tracker?.current() ?? NO_TOKENS, { ...outcome, error: 'CLIENT_ABORTED' });
        case 'upstream-broken':
          return finish('FAILED', tracker?.current() ?? NO_TOKENS, { ...outcome, error: 'UPSTREAM_BROKEN' });
        case 'upstream-failed': {
          const failure = upstreamFailure(end.error, provider);
          request.log.warn({ err: end.error, provider: provider.name }, 'upstream request failed');
          const payload = JSON.stringify(provider.adapter.errorBody(failure.status, failure.message, failure.code));
          res.writeHead(failure.status, {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(payload),
            'x-runguard-step-id': stepId,
            'x-runguard-request-id': request.id,
            'x-request-id': request.id,
          });
          res.end(payload);
          return finish('FAILED', NO_TOKENS, {
            http_status: failure.status,
            error: failure.code,
            detail: failure.message,
          });
        }
      }
    },
  };
  return forward(provider, upstreamRequest, res, hooks, { held: true });
}
