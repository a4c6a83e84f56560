/**
 * The proxy: `/proxy/runs/{run_id}/{provider}/...`, `/proxy/t/{token}/{provider}/...` and
 * `/proxy/{provider}/...`. Each call reads as: resolve the principal and the run, check the step
 * (rules 1 to 4) and record it, forward, relay the answer while reading its usage, record the
 * result. One step insert before forwarding and one update after, off the response's path.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyError, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ServerResponse } from 'node:http';
import { formatOverheadMs, OVERHEAD_HEADER, ProxyCallTimer, type Metrics } from '../metrics.js';
import type { ApiKeyVerifier } from '../api/auth.js';
import { CLIENT_ABORT_MESSAGE, isClientAbort } from '../api/client-abort.js';
import { toApiError } from '../api/error-handler.js';
import { pathUuid, UUID_PATTERN } from '../api/schemas.js';
import { ApiError, isApiError } from '../errors.js';
import type { Clock } from '../clock.js';
import type { CreatedStep, DecisionView, GuardService, StepInput } from '../service/guard-service.js';
import { isDatabaseDown, type Db } from '../store/db.js';
import { auditSummary, type AuditOptions } from './audit-summary.js';
import {
  BodyBudget,
  BodyReservation,
  declaredLength,
  exposeBodyBudget,
  meteredBody,
  overloaded,
} from './body-budget.js';
import { denialMessage } from './denial-message.js';
import type { CallsInProgress } from './calls-in-progress.js';
import { clientHeaders, forward, upstreamFailure, upstreamHeaders } from './forwarder.js';
import { rewrittenBytes } from './json-rewrite.js';
import type { Provider, ProviderRegistry } from './provider-registry.js';
import { NO_USAGE, type Usage, type UsageTracker } from './providers/index.js';
import { proxyTokenStore, type ProxyTokenStore } from './proxy-tokens.js';
import { requestBounds } from './request-bounds.js';

export interface ProxyOptions {
  providers: ProviderRegistry;
  /**
   * The key a call without `x-runguard-key` is guarded with. Set it only when the daemon listens
   * on loopback: anyone who can reach the port acts with it.
   */
  defaultApiKey: string | null;
  /** The user of a run-less call without `x-runguard-user-id`; null: the header is required. */
  defaultUserId: string | null;
  /** Largest request body; it is read whole, as the model must be known before forwarding. */
  bodyLimitBytes: number;
  /** Request-body bytes held at once across all calls (see body-budget.ts). @default 4 x bodyLimitBytes */
  bodyBudgetBytes?: number;
  audit?: AuditOptions;
}

/** Waits between attempts at a proxied call's record; the last repeats. */
const RECORD_RETRY_DELAYS_MS = [100, 250, 500, 1_000, 2_000, 5_000];
/** How long a proxied call's record is retried: longer than a restart or a failover of Postgres. */
const RECORD_RETRY_FOR_MS = 10 * 60_000;

/**
 * `write()` until it succeeds, while the database is down (any other failure is final), for up to
 * RECORD_RETRY_FOR_MS; once `stopping` is aborted, one more attempt only.
 */
async function untilStored<T>(
  write: () => Promise<T>,
  stopping: AbortSignal,
  retrying: (error: unknown) => void,
): Promise<T> {
  const giveUpAt = performance.now() + RECORD_RETRY_FOR_MS;
  for (let attempt = 0; ; attempt++) {
    try {
      return await write();
    } catch (error) {
      // The API's own reading of a failure (it answers 503): the database is down, for now.
      if (!isDatabaseDown(error) || stopping.aborted || performance.now() > giveUpAt) throw error;
      retrying(error);
      const delay = RECORD_RETRY_DELAYS_MS[Math.min(attempt, RECORD_RETRY_DELAYS_MS.length - 1)]!;
      await sleep(delay, undefined, { signal: stopping }).catch(() => {});
    }
  }
}

/** An answer of the proxy's own, outside the API's error table (it speaks the provider's format). */
class ProxyRefusal extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: string,
    message: string,
    readonly stepId?: string,
  ) {
    super(message);
  }
}

/** Where a call goes: a workspace, and a run (null: start one around the call). */
interface Target {
  workspaceId: string;
  runId: string | null;
  userId: string | null;
  /** How the run was named: an ended run reads as a dead token, or as a refused run id. */
  via: 'token' | 'run' | 'auto';
}

/** What is known of a call from its request line and headers, before a byte of its body is read. */
interface CallHead {
  provider: Provider;
  path: string;
  target: Target;
  reservation: BodyReservation;
  /** Time spent resolving the target: the daemon's overhead, though spent before the body came. */
  resolveNs: bigint;
}

declare module 'fastify' {
  interface FastifyRequest {
    proxyCall: CallHead | null;
  }
}

interface ProxyParams {
  provider: string;
  run_id?: string;
  token?: string;
  '*': string;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);
const UUID = new RegExp(UUID_PATTERN);

/** Request URLs in logs lose their query string and any proxy token. */
export function redactProxyUrl(url: string): string {
  // Not anchored: an absolute-form target (`http://host/proxy/t/...`) carries the token too.
  return (url.split('?')[0] ?? '').replace(/\/proxy\/t\/[^/]+/, '/proxy/t/[redacted]');
}

/**
 * Fastify's request log line for proxy routes: no token, no query string, never a header.
 * Typed as Fastify declares serializers (returning a string), though pino takes any value.
 */
export const proxyRequestSerializer = ((req: { method: string; url: string; ip?: string }) => ({
  method: req.method,
  url: redactProxyUrl(req.url),
  remoteAddress: req.ip,
})) as unknown as (value: unknown) => string;

/** The upstream-relative path: the raw URL past its first `skip` segments, query string kept. */
function upstreamPath(rawUrl: string, skip: number): string {
  // An absolute-form request target (`POST http://any.host/proxy/...`, RFC 9112 3.2.2) is routed
  // by its path; its authority names nothing we forward to (upstreams are configuration), so only
  // the path counts here too. Without this its segments would be miscounted.
  rawUrl = rawUrl.replace(/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i, '');
  const q = rawUrl.indexOf('?');
  const path = q === -1 ? rawUrl : rawUrl.slice(0, q);
  const segments = path.split('/').slice(skip);
  for (const segment of segments) {
    let decoded = segment;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      /* left for the upstream to refuse */
    }
    // The upstream's base path is configuration: a dot segment must not climb out of it.
    if (decoded === '.' || decoded === '..' || decoded.includes('/') || decoded.includes('\\')) {
      throw new ProxyRefusal(400, 'BAD_PATH', 'The path may not contain dot segments or encoded slashes.');
    }
  }
  return `/${segments.join('/')}${q === -1 ? '' : rawUrl.slice(q)}`;
}

function parseBody(body: Buffer | undefined, contentType: string | undefined): unknown {
  if (!body || body.length === 0) return undefined;
  if (contentType && !/json/i.test(contentType)) return undefined;
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    return undefined; // not ours to refuse: the upstream answers a malformed body
  }
}

function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

export const proxyRoutes: FastifyPluginAsync<{
  guard: GuardService;
  db: Db;
  keys: ApiKeyVerifier;
  clock: Clock;
  options: ProxyOptions;
  /** Upstream time and the daemon's own overhead per call; null: not measured. */
  metrics: Metrics | null;
  /** Where calls still to be recorded are counted (the app's close waits for them). */
  calls: CallsInProgress;
  tokens?: ProxyTokenStore;
}> = async (app, deps) => {
  const { guard, db, keys, clock, options, metrics, calls } = deps;
  const registry = options.providers;
  const tokens = deps.tokens ?? proxyTokenStore(db);
  const audit = options.audit ?? {};
  const budget = new BodyBudget(options.bodyBudgetBytes ?? 4 * options.bodyLimitBytes);
  if (metrics) exposeBodyBudget(metrics.registry, budget);
  app.decorateRequest('proxyCall', null);

  // The body is the client's bytes, forwarded as they are; JSON is parsed only to look inside.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: options.bodyLimitBytes }, (_req, body, done) => {
    done(null, body);
  });

  // Errors before forwarding answer in the provider's own format, so its SDK raises the right error.
  app.setErrorHandler((error: FastifyError | ProxyRefusal, request, reply) => {
    const provider = registry.get((request.params as Partial<ProxyParams> | undefined)?.provider ?? '');
    let status: number;
    let code: string;
    let message: string;
    if (error instanceof ProxyRefusal) {
      [status, code, message] = [error.statusCode, error.code, error.message];
      if (error.stepId) void reply.header('x-runguard-step-id', error.stepId);
    } else {
      const apiError = toApiError(error);
      if (apiError.statusCode >= 500 && apiError.code !== 'OVERLOADED')
        request.log.error({ err: error }, 'proxy request failed');
      if (apiError.code === 'OVERLOADED') void reply.header('retry-after', '1');
      if (isClientAbort(error)) request.log.info({ code: error.code }, CLIENT_ABORT_MESSAGE);
      [status, code, message] = [apiError.statusCode, apiError.code, apiError.message];
    }
    // A refusal by the guard does not get better by retrying; SDKs honour this header.
    if (status < 500) void reply.header('x-should-retry', 'false');
    const body = provider
      ? status === 403 && error instanceof ProxyRefusal
        ? provider.adapter.denialBody(code, message)
        : provider.adapter.errorBody(status, message, code)
      : { detail: message, code };
    void reply.status(status).send(body);
  });

  async function principalWorkspace(request: FastifyRequest): Promise<string> {
    const given = header(request, 'x-runguard-key');
    // The daemon's own key stands in only for callers on this machine.
    const key =
      given ??
      (options.defaultApiKey && LOOPBACK.has(request.socket.remoteAddress ?? '') ? options.defaultApiKey : null);
    if (!key) throw new ApiError('UNAUTHORIZED', 'Missing x-runguard-key header.');
    const principal = await keys.verify(key, clock.now());
    if (!principal) throw new ApiError('UNAUTHORIZED', 'Invalid x-runguard-key.');
    return principal.workspaceId;
  }

  async function resolveTarget(request: FastifyRequest<{ Params: ProxyParams }>): Promise<Target> {
    const { token, run_id: runId } = request.params;
    if (token !== undefined) {
      const target = await tokens.resolve(token);
      if (!target) throw new ApiError('UNAUTHORIZED', 'Invalid proxy token.');
      return { ...target, userId: null, via: 'token' };
    }
    const workspaceId = await principalWorkspace(request);
    if (runId !== undefined) {
      if (!UUID.test(runId)) throw new ApiError('RUN_NOT_FOUND');
      return { workspaceId, runId: pathUuid(runId), userId: null, via: 'run' };
    }
    const userId = header(request, 'x-runguard-user-id') ?? options.defaultUserId;
    if (!userId || userId.length > 256) {
      throw new ApiError(
        'BAD_REQUEST',
        'A call without a run needs the x-runguard-user-id header (1 to 256 characters).',
      );
    }
    return { workspaceId, runId: null, userId, via: 'auto' };
  }

  const denial = (step: { id?: string; decision: DecisionView }, what: string) =>
    new ProxyRefusal(403, step.decision.reason ?? 'DENIED', denialMessage(what, step.decision), step.id);

  async function createStep(target: Target, runId: string, input: StepInput): Promise<CreatedStep> {
    try {
      return await guard.createStep(target.workspaceId, runId, { ...input, sequence: null });
    } catch (error) {
      if (isApiError(error) && error.code === 'RUN_NOT_RUNNING') {
        // A token dies with its run. A run id names a run the caller may see, but not use any more.
        if (target.via === 'token')
          throw new ApiError('UNAUTHORIZED', 'The proxy token has expired: its run is no longer RUNNING.');
        throw new ProxyRefusal(403, 'RUN_NOT_RUNNING', 'The run is not RUNNING.');
      }
      if (isApiError(error) && error.code === 'RUN_NOT_FOUND' && target.via === 'token') {
        throw new ApiError('UNAUTHORIZED', 'Invalid proxy token.');
      }
      throw error;
    }
  }

  /**
   * Everything decided from the request line and headers, before a byte of the body is read: an
   * unknown provider, a bad path or credential is refused at once (its body is never held:
   * unread-body.ts discards a little of it, then closes), and the body's bytes are reserved.
   */
  async function beforeBody(request: FastifyRequest<{ Params: ProxyParams }>, reply: FastifyReply, skip: number) {
    const resolving = process.hrtime.bigint();
    const provider = registry.get(request.params.provider);
    if (!provider) throw new ApiError('NOT_FOUND', `No provider named "${request.params.provider}" is configured.`);
    const path = upstreamPath(request.raw.url ?? '/', skip);
    const target = await resolveTarget(request);
    // The model is read from the body before anything goes upstream: a compressed body would go
    // unread, and its call unpriced.
    const encoding = request.headers['content-encoding'];
    if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
      throw new ProxyRefusal(
        415,
        'UNSUPPORTED_CONTENT_ENCODING',
        'runguard reads a request to check it: send it without Content-Encoding.',
      );
    }
    const reservation = new BodyReservation(budget, reply.raw);
    const declared = declaredLength(request.raw);
    // Over the per-request limit, the body parser answers 413 without reading: nothing to hold.
    if (declared !== null && declared <= options.bodyLimitBytes && !reservation.take(declared)) throw overloaded();
    request.proxyCall = { provider, path, target, reservation, resolveNs: process.hrtime.bigint() - resolving };
  }

  async function handle(request: FastifyRequest<{ Params: ProxyParams }>, reply: FastifyReply) {
    const { provider, path, target, resolveNs } = request.proxyCall!;
    const arrived = process.hrtime.bigint() - resolveNs;

    const raw = Buffer.isBuffer(request.body) ? request.body : undefined;
    const parsed = parseBody(raw, request.headers['content-type']);
    const inspected = provider.adapter.inspectRequest(path, parsed);
    const inputData = auditSummary(
      { provider: provider.name, method: request.method, path, inspected, body: parsed, bodyBytes: raw?.length ?? 0 },
      audit,
    );

    const stepInput = {
      type: 'MODEL_CALL' as const,
      model: inspected.model === null ? null : inspected.model.slice(0, 256),
      input_data: inputData,
      bounds: requestBounds(path, parsed, raw?.length ?? 0),
    };
    let runId: string;
    let step: CreatedStep;
    if (target.runId === null) {
      // A run of the call's own: started with its step, in one commit. The step's rules are the
      // first four of the start's, read from the same inputs, and the step-only rules (below).
      const started = await guard.startRunWithStep(
        target.workspaceId,
        { user_id: target.userId!, metadata: { proxy: provider.name } },
        stepInput,
      );
      if (started.run.status === 'BLOCKED') throw denial({ decision: started.run.decision }, 'run');
      runId = started.run.id;
      step = started.step!;
    } else {
      runId = target.runId;
      step = await createStep(target, runId, stepInput);
    }
    if (step.status === 'BLOCKED') {
      // A step-only rule (model_priced) denied the call of a run of its own: that run ends here.
      if (target.runId === null)
        await guard
          .endRun(target.workspaceId, runId, 'FAILED')
          .catch((error: unknown) => request.log.warn({ err: error }, "ending a denied call's run failed"));
      throw denial(step, 'model call');
    }

    const body =
      inspected.rewrittenBody === undefined
        ? (raw ?? null)
        : rewrittenBytes(raw ?? Buffer.alloc(0), parsed, inspected.rewrittenBody);
    reply.hijack();
    exchange(
      request,
      reply.raw,
      provider,
      path,
      body,
      {
        workspaceId: target.workspaceId,
        runId,
        stepId: step.id,
        endRun: target.via === 'auto',
      },
      new ProxyCallTimer(metrics, provider.name, arrived),
    );
  }

  /** The forwarding proper: from here the answer is ours to write, and the step's result ours to record. */
  function exchange(
    request: FastifyRequest,
    res: ServerResponse,
    provider: Provider,
    path: string,
    body: Buffer | null,
    step: { workspaceId: string; runId: string; stepId: string; endRun: boolean },
    timer: ProxyCallTimer,
  ) {
    const started = performance.now();
    const recorded = calls.begin();
    const record = (status: 'COMPLETED' | 'FAILED', usage: Usage, outcome: Record<string, unknown>) => {
      timer.finish(status === 'COMPLETED' ? 'ok' : outcome.error === 'CLIENT_ABORTED' ? 'aborted' : 'error');
      const result = {
        status,
        durationMs: Math.round(performance.now() - started),
        promptTokens: usage.promptTokens,
        completionTokens: usage.completionTokens,
        cacheReadTokens: usage.cacheReadTokens,
        cacheWriteTokens: usage.cacheWriteTokens,
        reasoningTokens: usage.reasoningTokens,
        outputData: outcome,
      };
      // The client has its answer and the provider bills the call: the result (its cost) and the
      // end of a run of the call's own are retried until the store takes them, so a moment without
      // Postgres neither loses the spend nor leaves the run holding a concurrent-run slot.
      const retried = (what: string) => (error: unknown) =>
        request.log.warn({ err: error, stepId: step.stepId }, `${what} failed; retrying`);
      const written = async () => {
        // A run of the call's own ends right after its result: that result goes at once, not with
        // the results that wait for company, so the run stops counting against the concurrent-run
        // limit as soon as it can. A result already taken (an attempt whose answer was lost) is final.
        let attempts = 0;
        await untilStored(
          () => {
            attempts++;
            return step.endRun
              ? guard.finishStep(step.workspaceId, step.runId, step.stepId, result)
              : guard.recordResult(step.workspaceId, step.runId, step.stepId, result);
          },
          calls.stopping,
          retried('recording a proxied call'),
        ).catch((error: unknown) => {
          if (!(isApiError(error) && error.code === 'STEP_ALREADY_FINISHED')) throw error;
          // After a retry, our own earlier attempt landed; at the first, someone else finished the step.
          if (attempts === 1)
            request.log.warn(
              { stepId: step.stepId },
              "a proxied call's step was already finished; its result was not recorded",
            );
        });
        if (step.endRun) {
          await untilStored(
            () => guard.endRun(step.workspaceId, step.runId, status),
            calls.stopping,
            retried("ending a proxied call's run"),
          ).catch((error: unknown) => {
            if (!(isApiError(error) && error.code === 'RUN_NOT_RUNNING')) throw error;
          });
        }
      };
      // A run of the call's own stops holding a concurrency slot here now; its end follows.
      if (step.endRun) guard.runAnswered(step.workspaceId, step.runId);
      written()
        .catch((error: unknown) =>
          request.log.error({ err: error, stepId: step.stepId }, 'recording a proxied call failed'),
        )
        .finally(recorded);
    };
    if (res.destroyed || !res.socket || res.socket.destroyed) {
      // The client left while the step was being checked: nothing is sent upstream.
      record('FAILED', NO_USAGE, { error: 'CLIENT_ABORTED' });
      return;
    }

    let tracker: UsageTracker | null = null;
    const outcome: Record<string, unknown> = {};
    timer.upstreamStarted();
    forward(provider, { method: request.method, path, headers: upstreamHeaders(request.headers), body }, res, {
      answered(statusCode, upstream) {
        const headers = clientHeaders(upstream);
        headers['x-runguard-step-id'] = step.stepId;
        // The daemon's id of the call (its log's key) goes under a name of its own: the provider's
        // `x-request-id`, which its support asks for and its SDK reads, is the client's to keep.
        headers['x-runguard-request-id'] = request.id;
        headers['x-request-id'] ??= request.id;
        // The sidecar's own time on this call until the upstream answered: guard checks and records.
        headers[OVERHEAD_HEADER] = formatOverheadMs(timer.overheadMs());
        const contentType = upstream['content-type'];
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
              return record('FAILED', usage, { ...outcome, error: 'UPSTREAM_STREAM_ERROR' });
            return record(ok ? 'COMPLETED' : 'FAILED', usage, outcome);
          }
          // A cut stream: what was read before the cut (an SSE stream's usage so far).
          case 'client-left':
            return record('FAILED', tracker?.current() ?? NO_USAGE, { ...outcome, error: 'CLIENT_ABORTED' });
          case 'upstream-broken':
            return record('FAILED', tracker?.current() ?? NO_USAGE, { ...outcome, error: 'UPSTREAM_BROKEN' });
          case 'upstream-failed': {
            const failure = upstreamFailure(end.error);
            request.log.warn({ err: end.error, provider: provider.name }, 'upstream request failed');
            const payload = JSON.stringify(provider.adapter.errorBody(failure.status, failure.message, failure.code));
            res.writeHead(failure.status, {
              'content-type': 'application/json',
              'content-length': Buffer.byteLength(payload),
              'x-runguard-step-id': step.stepId,
              'x-runguard-request-id': request.id,
              'x-request-id': request.id,
            });
            res.end(payload);
            return record('FAILED', NO_USAGE, { http_status: failure.status, error: failure.code });
          }
        }
      },
    });
  }

  // A body without a declared length is reserved chunk by chunk as it arrives.
  const preParsing = async (request: FastifyRequest, _reply: FastifyReply, payload: NodeJS.ReadableStream) =>
    request.proxyCall && declaredLength(request.raw) === null
      ? meteredBody(payload, request.proxyCall.reservation)
      : payload;
  const route = (skip: number) => ({
    config: { auth: 'none' as const },
    schema: { hide: true },
    onRequest: (request: FastifyRequest<{ Params: ProxyParams }>, reply: FastifyReply) =>
      beforeBody(request, reply, skip),
    preParsing,
  });
  app.all<{ Params: ProxyParams }>('/proxy/runs/:run_id/:provider/*', route(5), handle);
  app.all<{ Params: ProxyParams }>('/proxy/t/:token/:provider/*', route(5), handle);
  app.all<{ Params: ProxyParams }>('/proxy/:provider/*', route(3), handle);
};
