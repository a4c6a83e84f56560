/**
 * Everything decided from a proxied call's request line and headers, before a byte of its body is
 * read: an unknown provider, a bad path or credential is refused at once (its body is never held:
 * unread-body.ts discards a little of it, then closes), and the body's bytes are reserved.
 */
import type { FastifyReply, FastifyRequest, preParsingHookHandler, RequestPayload } from 'fastify';
import { BodyBudget, BodyReservation, declaredLength, meteredBody, overloaded } from './body-budget.js';
import { ApiError } from '../errors.js';
import type { Target, TargetRequest, ProxyParams } from './call-target.js';
import { upstreamPath } from './call-target.js';
import { providerPath, type Provider, type ProviderRegistry } from './provider-registry.js';
import { ProxyRefusal } from './proxy-refusal.js';

/** What is known of a call from its request line and headers, before a byte of its body is read. */
export interface CallHead {
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

export interface CallHeadOptions {
  registry: ProviderRegistry;
  resolveTarget: (request: TargetRequest) => Promise<Target>;
  budget: BodyBudget;
  bodyLimitBytes: number;
}

/** The proxy routes' `onRequest` (given the route's segment count) and `preParsing` hooks. */
export function callHeadHooks(options: CallHeadOptions) {
  const { registry, resolveTarget, budget, bodyLimitBytes } = options;

  async function readCallHead(request: FastifyRequest<{ Params: ProxyParams }>, reply: FastifyReply, skip: number) {
    const resolving = process.hrtime.bigint();
    const provider = registry.get(request.params.provider);
    if (!provider) throw new ApiError('NOT_FOUND', `No provider named "${request.params.provider}" is configured.`);
    // A protocol switch the proxy does not relay is said so at once: a client that tries a
    // WebSocket first (Codex) then falls back to HTTP, and nothing reaches the upstream.
    if (request.headers.upgrade !== undefined) throw upgradeNotRelayed(request.headers.upgrade);
    const path = providerPath(provider, upstreamPath(request.raw.url ?? '/', skip));
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
    if (declared !== null && declared <= bodyLimitBytes && !reservation.take(declared)) throw overloaded();
    request.proxyCall = { provider, path, target, reservation, resolveNs: process.hrtime.bigint() - resolving };
  }

  // A body without a declared length is reserved chunk by chunk as it arrives.
  // A callback hook, not an async one: every call passes here, and a promise each is waste.
  const meterBody: preParsingHookHandler = (request, _reply, payload, done) => {
    done(
      null,
      request.proxyCall && declaredLength(request.raw) === null
        ? (meteredBody(payload, request.proxyCall.reservation) as RequestPayload)
        : payload,
    );
  };

  return { readCallHead, meterBody };
}

/** 426: the request asked to switch protocols on a path where the proxy relays plain HTTP only. */
export function upgradeNotRelayed(protocol: string): ProxyRefusal {
  return new ProxyRefusal(
    426,
    'UPGRADE_NOT_RELAYED',
    `runguard does not relay a switch to "${protocol.slice(0, 32)}" on this path: send the request over plain HTTP.`,
  );
}
