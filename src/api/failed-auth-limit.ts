/**
 * Failed authentication, rate-limited per client address on every route: an address whose
 * requests were answered 401 `maxPerWindow` times within a window is answered 429 at once (before
 * any credential lookup or body read) until the window ends. Each forged API key, JWT or proxy
 * token otherwise costs a database lookup or a signature check, for free.
 *
 * @fastify/rate-limit counts every request; here only failures count, so a busy, well-configured
 * client is never slowed. The count lives in this process (a fleet multiplies it by its size).
 */
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../errors.js';

export interface FailedAuthLimitOptions {
  maxPerWindow: number;
  /** @default 60_000 */
  windowMs?: number;
  /** Addresses remembered at most; the oldest windows are forgotten first. @default 10_000 */
  maxAddresses?: number;
  now?: () => number;
}

interface Window {
  startedAt: number;
  failures: number;
}

export class FailedAuthLimiter {
  private readonly windows = new Map<string, Window>();
  private readonly windowMs: number;
  private readonly maxAddresses: number;
  private readonly now: () => number;

  constructor(
    private readonly maxPerWindow: number,
    options: Omit<FailedAuthLimitOptions, 'maxPerWindow'> = {},
  ) {
    this.windowMs = options.windowMs ?? 60_000;
    this.maxAddresses = options.maxAddresses ?? 10_000;
    this.now = options.now ?? Date.now;
  }

  /** Milliseconds until the address may try again; 0 when it may now. */
  blockedFor(address: string): number {
    const window = this.current(address);
    if (!window || window.failures < this.maxPerWindow) return 0;
    return window.startedAt + this.windowMs - this.now();
  }

  failed(address: string): void {
    let window = this.current(address);
    if (!window) {
      // Bounded: a flood from many addresses forgets the oldest rather than growing the map.
      if (this.windows.size >= this.maxAddresses) this.windows.delete(this.windows.keys().next().value!);
      window = { startedAt: this.now(), failures: 0 };
      this.windows.set(address, window);
    }
    window.failures++;
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

/** Registers the limit on every route of `app`: call before the auth hook, so it runs first. */
export function registerFailedAuthLimit(app: FastifyInstance, limiter: FailedAuthLimiter) {
  // Callback hooks, not async ones: every request passes here, and a promise each is waste.
  app.addHook('onRequest', (request, reply, done) => {
    // A health probe takes no credential: refusing it would let a neighbour on a shared address
    // have an orchestrator restart a healthy daemon.
    const waitMs = request.routeOptions.url === '/health' ? 0 : limiter.blockedFor(request.ip);
    if (waitMs <= 0) {
      done();
      return;
    }
    void reply.header('retry-after', String(Math.max(1, Math.ceil(waitMs / 1000))));
    done(new ApiError('RATE_LIMITED', 'Too many failed authentication attempts from this address; try again later.'));
  });
  app.addHook('onResponse', (request, reply, done) => {
    if (reply.statusCode === 401) limiter.failed(request.ip);
    done();
  });
}
