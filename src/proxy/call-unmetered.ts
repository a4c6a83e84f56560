/**
 * Requests through the proxy that are not model calls: a GET or HEAD (a listing of models, a
 * stored response, a client checking that the host answers) and a token count. They bill nothing,
 * so they are no step of the run (a step is a model call the guard decided, and counts against
 * `max_steps`): they are forwarded as they are, unrecorded. They still need the call's credential,
 * and a run's token or id only while the run is RUNNING.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { ApiError } from '../errors.js';
import type { Queryable } from '../store/db.js';
import { runStatus } from '../store/runs.js';
import { namedRunRefusal } from './call-check.js';
import type { Target } from './call-target.js';
import { clientHeaders, forward, upstreamFailure, upstreamHeaders } from './forwarder.js';
import type { Provider } from './provider-registry.js';

/** Methods that read: they never start generation. */
const READS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Whether a request is a model call: anything but a read or a token count, as far as the guard knows. */
export function isModelCall(provider: Provider, method: string, path: string): boolean {
  if (READS.has(method)) return false;
  return !(method === 'POST' && provider.adapter.isUnbilled(path));
}

/** A named run must still be RUNNING: its token dies with it. */
export async function checkRunStillRunning(db: Queryable, target: Target): Promise<void> {
  if (target.runId === null) return;
  const status = await runStatus(db, target.workspaceId, target.runId);
  if (status === null) throw namedRunRefusal(target, new ApiError('RUN_NOT_FOUND'));
  if (status !== 'RUNNING') throw namedRunRefusal(target, new ApiError('RUN_NOT_RUNNING'));
}

export interface UnmeteredRequest {
  id: string;
  method: string;
  headers: IncomingHttpHeaders;
  log: FastifyBaseLogger;
}

/** Forwards the request and relays its answer as it comes; nothing is recorded. */
export function relayUnmetered(
  request: UnmeteredRequest,
  res: ServerResponse,
  provider: Provider,
  path: string,
  body: Buffer | null,
): void {
  if (res.destroyed) return;
  const upstreamRequest = { method: request.method, path, headers: upstreamHeaders(request.headers), body };
  forward(provider, upstreamRequest, res, {
    answered(_status, headers) {
      const out = clientHeaders(headers);
      out['x-runguard-request-id'] = request.id;
      return out;
    },
    chunk() {},
    ended(end) {
      if (end.kind !== 'upstream-failed') return;
      const failure = upstreamFailure(end.error, provider);
      request.log.warn({ err: end.error, provider: provider.name }, 'upstream request failed');
      const payload = JSON.stringify(provider.adapter.errorBody(failure.status, failure.message, failure.code));
      res.writeHead(failure.status, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(payload),
        'x-runguard-request-id': request.id,
      });
      res.end(payload);
    },
  });
}
