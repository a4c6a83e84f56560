/**
 * Failed authentication, rate-limited per client address on every route: an address whose
 * requests were answered 401 `maxPerWindow` times within a window is answered 429 at once (before
 * any credential lookup or body read) until the window ends. Each forged API key, JWT or proxy
 * token otherwise costs a database lookup or a signature check, for free.
 *
 * Only the failures are limited, not the address's valid credentials: a credential that
 * authenticated in this process lately is still served from an address over its failures (it costs
 * one hash to recognize), and one credential not seen yet may be tried each second (the first call of
 * a valid key from a crowded address waits at most that; a forger gets one lookup a second).
 *
 * @fastify/rate-limit counts every request; here only failures count, so a busy, well-configured
 * client is never slowed. The counts live in this process (a fleet multiplies them by its size).
 */
import { hash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import { bearerToken } from './auth.js';

export interface FailedAuthLimitOptions {
  maxPerWindow: number;
  /** @default 60_000 */
  windowMs?: number;
  /** Addresses remembered at most; the oldest windows are forgotten first. @default 10_000 */
  maxAddresses?: number;
  /** Credentials that authenticated remembered at most; the oldest are forgotten first. @default 10_000 */
  maxKnown?: number;
  /** How long a credential that authenticated is remembered. @default 3_600_000 */
  knownMs?: number;
  now?: () => number;
}

interface Window {
  startedAt: number;
  failures: number;
  /** Over the limit: when a credential not known was last let through to be tried. */
  triedAt: number;
}

/** How often an address over its failures may try a credential this process has not seen authenticate. */
const TRIAL_INTERVAL_MS = 1_000;

// One-shot, as every authenticated request passes here (no `Hash` object per request).
const digestOf = (credential: string) => hash('sha256', credential, 'base64');

export class FailedAuthLimiter {
  private readonly windows = new Map<string, Window>();
  /** Digests of credentials that authenticated, to when they are forgotten. */
  private readonly known = new Map<string, number>();
  private readonly windowMs: number;
  private readonly maxAddresses: number;
  private readonly maxKnown: number;
  private readonly knownMs: number;
  private readonly now: () => number;

  constructor(
    private readonly maxPerWindow: number,
    options: Omit<FailedAuthLimitOptions, 'maxPerWindow'> = {},
  ) {
    this.windowMs = options.windowMs ?? 60_000;
    this.maxAddresses = options.maxAddresses ?? 10_000;
    this.maxKnown = options.maxKnown ?? 10_000;
    this.knownMs = options.knownMs ?? 3_600_000;
    this.now = options.now ?? Date.now;
  }

  /** Whether the address has failed as often as its window allows (a lookup, no hash). */
  overLimit(address: string): boolean {
    const window = this.current(address);
    return window !== undefined && window.failures >= this.maxPerWindow;
  }

  /**
   * Milliseconds until a request from the address, with this credential (null: none), may be
   * tried; 0 when it may now.
   */
  blockedFor(address: string, credential: string | null = null): number {
    const window = this.current(address);
    if (!window || window.failures < this.maxPerWindow) return 0;
    const now = this.now();
    const windowEnd = window.startedAt + this.windowMs;
    if (credential === null) return windowEnd - now;
    if (this.isKnown(digestOf(credential), now)) return 0;
    const nextTrial = window.triedAt + TRIAL_INTERVAL_MS;
    if (nextTrial <= now) {
      window.triedAt = now;
      return 0;
    }
    return Math.min(nextTrial, windowEnd) - now;
  }

  failed(address: string, credential: string | null = null): void {
    if (credential !== null) this.known.delete(digestOf(credential));
    let window = this.current(address);
    if (!window) {
      // Bounded: a flood from many addresses forgets the oldest rather than growing the map.
      if (this.windows.size >= this.maxAddresses) this.windows.delete(this.windows.keys().next().value!);
      window = { startedAt: this.now(), failures: 0, triedAt: 0 };
      this.windows.set(address, window);
    }
    window.failures++;
    // The failure that reaches the limit starts the wait for the first trial.
    if (window.failures === this.maxPerWindow) window.triedAt = this.now();
  }

  /** The credential authenticated: it is served even from an address over its failures. */
  succeeded(credential: string): void {
    const digest = digestOf(credential);
    // Re-inserted, so the map's order is the order of last use and the oldest is forgotten first.
    this.known.delete(digest);
    if (this.known.size >= this.maxKnown) this.known.delete(this.known.keys().next().value!);
    this.known.set(digest, this.now() + this.knownMs);
  }

  private isKnown(digest: string, now: number): boolean {
    const until = this.known.get(digest);
    if (until === undefined) return false;
    if (until > now) return true;
    this.known.delete(digest);
    return false;
  }

  private current(address: string): Window | undefined {
    const window = this.windows.get(address);
    if (window && window.startedAt + this.windowMs <= this.now()) {
      this.windows.delete(address);
      return undefined;
    }
    return window;
  }
}

/**
 * The credential a request presents to runguard: a proxy token in its path, the `x-runguard-key`
 * of a proxied call, or the API's bearer credential. (A proxied call's `Authorization` is the
 * provider's key when it carries a token or an `x-runguard-key`.)
 */
export function presentedCredential(request: FastifyRequest): string | null {
  const token = (request.params as { token?: unknown } | undefined)?.token;
  if (typeof token === 'string' && token.length > 0) return token;
  const key = request.headers['x-runguard-key'];
  if (typeof key === 'string' && key.length > 0) return key;
  return bearerToken(request);
}

/**
 * Registers the limit on every route of `app`: call before the auth hook, so it runs first.
 * `authenticated` tells whether a request's credential was verified (its principal or its
 * proxied call's target resolved), so that it is served again from an address over its failures.
 */
export function registerFailedAuthLimit(
  app: FastifyInstance,
  limiter: FailedAuthLimiter,
  authenticated: (request: FastifyRequest) => boolean,
) {
  // Callback hooks, not async ones: every request passes here, and a promise each is waste.
  app.addHook('onRequest', (request, reply, done) => {
    // A health probe takes no credential: refusing it would let a neighbour on a shared address
    // have an orchestrator restart a healthy daemon.
    const waitMs =
      request.routeOptions.url === '/health' || !limiter.overLimit(request.ip)
        ? 0
        : limiter.blockedFor(request.ip, presentedCredential(request));
    if (waitMs <= 0) {
      done();
      return;
    }
    void reply.header('retry-after', String(Math.max(1, Math.ceil(waitMs / 1000))));
    done(new ApiError('RATE_LIMITED', 'Too many failed authentication attempts from this address; try again later.'));
  });
  const answered = failedAuthAccounting(limiter, authenticated);
  app.addHook('onResponse', (request, reply, done) => {
    answered(request, reply.statusCode);
    done();
  });
}

/** The limit's `onResponse`: a 401 counts against the address, a verified credential is known. */
export function failedAuthAccounting(
  limiter: FailedAuthLimiter,
  authenticated: (request: FastifyRequest) => boolean,
): (request: FastifyRequest, statusCode: number) => void {
  return (request, statusCode) => {
    const credential = presentedCredential(request);
    if (statusCode === 401) limiter.failed(request.ip, credential);
    else if (credential !== null && authenticated(request)) limiter.succeeded(credential);
  };
}
