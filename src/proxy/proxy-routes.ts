/**
 * The proxy: `/proxy/runs/{run_id}/{provider}/...`, `/proxy/t/{token}/{provider}/...` and
 * `/proxy/{provider}/...`. Each call reads as: resolve the provider, path and target from the
 * request line and headers (call-head.ts, call-target.ts), read what the body asks for
 * (call-input.ts), check the step and start its record (call-check.ts), forward at once while the
 * record commits and relay the answer once it is durable (call-relay.ts), record the result
 * (call-result.ts). A refusal answers in the provider's format (proxy-refusal.ts).
 */
import type { FastifyError, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ApiKeyVerifier } from '../admin/api-key-verifier.js';
import type { Clock } from '../clock.js';
import { ProxyCallTimer, type Metrics } from '../metrics.js';
import type { GuardService } from '../guard/guard-service.js';
import type { Db } from '../store/db.js';
import type { AuditOptions } from './audit-summary.js';
import { BodyBudget, exposeBodyBudget } from './body-budget.js';
import type { CallsInProgress } from './calls-in-progress.js';
import { checkCall, type CheckedCall } from './call-check.js';
import { checkRunStillRunning, isModelCall, relayUnmetered } from './call-unmetered.js';
import { callHeadHooks } from './call-head.js';
import { callInput } from './call-input.js';
import { relayCall } from './call-relay.js';
import { resultRecorder } from './call-result.js';
import { segmentsBeforeUpstreamPath, targetResolver, type ProxyParams } from './call-target.js';
import { directCalls, dispatchBeforeFastify, type AppHooks } from './direct-calls.js';
import type { ProviderRegistry } from './provider-registry.js';
import { refusalAnswer, ProxyRefusal } from './proxy-refusal.js';
import { loggedAsCall, requestOutcomes } from '../logger.js';
import { proxyTokenStore, type ProxyTokenStore } from './proxy-tokens.js';
import { socketUpgrades } from './socket-upgrades.js';
import { NO_TELEMETRY, traceparentOf, type RunTelemetry } from '../telemetry/telemetry.js';
import { traceDenial, tracedResult } from './call-telemetry.js';

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
  /** How long a relayed WebSocket may stay silent both ways before it is closed. @default 600_000 */
  webSocketIdleMs?: number;
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
  /** Where each call's step is traced. @default none */
  telemetry?: RunTelemetry;
  /** What the app's hooks do for a call: with it, model calls into a named run skip Fastify (direct-calls.ts). */
  appHooks?: AppHooks;
  // eslint-disable-next-line max-lines-per-function -- a route declaration, as src/api/routes/
}> = async (app, deps) => {
  const { guard, db, keys, clock, options, metrics, calls } = deps;
  const telemetry = deps.telemetry ?? NO_TELEMETRY;
  const registry = options.providers;
  const audit = options.audit ?? {};
  const budget = new BodyBudget(options.bodyBudgetBytes ?? 4 * options.bodyLimitBytes);
  if (metrics) exposeBodyBudget(metrics.registry, budget);
  const { defaultUserId, bodyLimitBytes } = options;
  const tokens = deps.tokens ?? proxyTokenStore(db);
  const resolveTarget = targetResolver({
    keys,
    clock,
    tokens,
    // Read at each call: the daemon's key changes when it is regenerated (a getter on `options`).
    get defaultApiKey() {
      return options.defaultApiKey;
    },
    defaultUserId,
    runStartedBy: (workspaceId, runId, apiKeyId) => guard.runStartedBy(workspaceId, runId, apiKeyId),
  });
  const { readCallHead, meterBody } = callHeadHooks({ registry, resolveTarget, budget, bodyLimitBytes });
  app.decorateRequest('proxyCall', null);

  // The Responses API's WebSocket; any other upgrade request goes to the routes as a plain request.
  const upgrades = socketUpgrades({
    server: app.server,
    registry,
    db,
    resolveTarget,
    guard,
    calls,
    audit,
    maxMessageBytes: bodyLimitBytes,
    idleMs: options.webSocketIdleMs ?? 600_000,
    log: app.log,
    telemetry,
  });
  app.server.on('upgrade', upgrades.onUpgrade);
  app.addHook('preClose', () => {
    app.server.off('upgrade', upgrades.onUpgrade);
    upgrades.open.closeAll();
  });

  // The body is the client's bytes, forwarded as they are; JSON is parsed only to look inside.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: bodyLimitBytes }, (_req, body, done) => {
    done(null, body);
  });

  // Errors before forwarding answer in the provider's own format, so its SDK raises the right error.
  const refused = (error: FastifyError | ProxyRefusal, request: { params?: unknown; log: FastifyRequest['log'] }) => {
    const provider = registry.get((request.params as Partial<ProxyParams> | undefined)?.provider ?? '');
    requestOutcomes.set(request, {
      decision: error instanceof ProxyRefusal && error.stepId ? 'DENIED' : 'REFUSED',
      reason: error.code ?? 'ERROR',
    });
    return refusalAnswer(error, provider, request.log);
  };
  app.setErrorHandler((error: FastifyError | ProxyRefusal, request, reply) => {
    const answer = refused(error, request);
    void reply.headers(answer.headers).status(answer.status).send(answer.body);
  });

  async function handle(request: FastifyRequest<{ Params: ProxyParams }>, reply: FastifyReply) {
    const { provider, path, target, resolveNs } = request.proxyCall!;
    if (!isModelCall(provider, request.method, path)) {
      await checkRunStillRunning(db, target);
      reply.hijack();
      const body = Buffer.isBuffer(request.body) && request.body.length > 0 ? request.body : null;
      return relayUnmetered(request, reply.raw, provider, path, body);
    }
    const arrived = process.hrtime.bigint() - resolveNs;
    const input = callInput(provider, { method: request.method, path, body: request.body }, audit);
    const traced = telemetry.enabled
      ? {
          start: {
            workspaceId: target.workspaceId,
            requestModel: input.stepInput.model,
            path,
            provider,
            startedAt: Date.now(),
          },
          traceparent: traceparentOf(request.headers.traceparent),
        }
      : null;
    let checked: CheckedCall;
    try {
      checked = await checkCall(guard, target, provider.name, input.stepInput, request.log);
    } catch (error) {
      if (traced) traceDenial(telemetry, traced.start, target.runId, error, traced.traceparent);
      throw error;
    }
    const { step, recorded } = checked;
    const body = input.bytesToForward();
    // Forwarded now, while the step's record commits; the answer is held until it is durable.
    const timer = new ProxyCallTimer(metrics, provider.name, arrived);
    const { stepId } = step;
    const call = { request, res: reply.raw, provider, path, body, stepId, timer };
    const written = resultRecorder(guard, calls, step, recorded, request.log, () => timer.resultRecorded());
    loggedAsCall.add(request);
    const recorder = traced ? tracedResult(written, telemetry, traced.start, step, traced.traceparent) : written;
    const held = relayCall(call, recorder);
    try {
      await recorded;
    } catch (error) {
      // No record, no answer: the upstream request is aborted, and the call refused as it would
      // have been had the record come first (503 while the database is down).
      held?.cancel(error as Error);
      throw error;
    }
    // From here the answer is ours to write, and the step's result ours to record.
    reply.hijack();
    held?.release();
  }

  const patterns = ['/proxy/runs/:run_id/:provider/*', '/proxy/t/:token/:provider/*', '/proxy/:provider/*'];
  if (deps.appHooks) {
    const hooks = deps.appHooks;
    // In the router's order: a static segment (`runs`, `t`) before a provider's name.
    const direct = patterns.map((route) =>
      directCalls({ route, registry, bodyLimitBytes, hooks, log: app.log, readCallHead, handle, refused }),
    );
    // Fastify answers 503 once the app is closing: from then on every request goes to it.
    app.addHook('preClose', (done) => {
      for (const calls of direct) calls.close();
      done();
    });
    app.addHook('onReady', (done) => {
      dispatchBeforeFastify(app.server, (req, res, toFastify) =>
        direct.some((calls) => calls.take(req, res, toFastify)),
      );
      done();
    });
  }

  for (const pattern of patterns) {
    const skip = segmentsBeforeUpstreamPath(pattern);
    const hooks = {
      config: { auth: 'none' as const },
      schema: { hide: true },
      onRequest: (request: FastifyRequest<{ Params: ProxyParams }>, reply: FastifyReply) =>
        readCallHead(request, reply, skip),
      preParsing: meterBody,
    };
    app.all<{ Params: ProxyParams }>(pattern, hooks, handle);
  }
};
