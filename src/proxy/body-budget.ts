/**
 * A budget of request-body bytes held at once across every proxied call. A proxied body is read
 * whole (the model must be known before forwarding), so the per-request limit alone lets N
 * parallel callers make the daemon hold N times that limit; the budget bounds the sum.
 *
 * A call reserves its declared `content-length` before a byte is read (refused at once when it
 * does not fit), or, without one (chunked), reserves chunk by chunk as the bytes arrive. What a
 * call reserved is released when its exchange with the client ends, however it ends.
 */
import { Transform, type TransformCallback } from 'node:stream';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Gauge, type Registry } from 'prom-client';
import { ApiError } from '../errors.js';

export class BodyBudget {
  private held = 0;

  constructor(readonly capacityBytes: number) {}

  get heldBytes(): number {
    return this.held;
  }

  /** Takes `bytes` when they fit; false (and nothing taken) when they do not. */
  tryTake(bytes: number): boolean {
    if (this.held + bytes > this.capacityBytes) return false;
    this.held += bytes;
    return true;
  }

  give(bytes: number): void {
    this.held = Math.max(0, this.held - bytes);
  }
}

/** The budget on `/metrics`: what is held now, out of how much. */
export function exposeBodyBudget(registry: Registry, budget: BodyBudget): void {
  new Gauge({
    name: 'runguard_proxy_body_bytes_held',
    help: 'Bytes of proxied request bodies held right now, across all calls',
    registers: [registry],
    collect() {
      this.set(budget.heldBytes);
    },
  });
  new Gauge({
    name: 'runguard_proxy_body_bytes_budget',
    help: 'Bytes of proxied request bodies the daemon holds at most',
    registers: [registry],
  }).set(budget.capacityBytes);
}

export function overloaded(): ApiError {
  return new ApiError('OVERLOADED', 'runguard holds as many request bodies as it may right now; try again shortly.');
}

/** One call's share of the budget: released once, when its response closes. */
export class BodyReservation {
  private bytes = 0;
  private released = false;

  constructor(
    private readonly budget: BodyBudget,
    response: ServerResponse,
  ) {
    response.on('close', () => this.release()); // `release` runs once: no `once` wrapper needed
  }

  take(bytes: number): boolean {
    if (this.released) return true; // the exchange is over: nothing is held any more
    if (!this.budget.tryTake(bytes)) return false;
    this.bytes += bytes;
    return true;
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.budget.give(this.bytes);
    this.bytes = 0;
  }
}

/** The declared length of a request's body; null when it has none declared (chunked). */
export function declaredLength(request: IncomingMessage): number | null {
  const raw = request.headers['content-length'];
  if (raw === undefined) return null;
  const n = Number(raw);
  return Number.isSafeInteger(n) && n >= 0 ? n : null;
}

/**
 * The body stream of a request without a declared length: each chunk is reserved before it is
 * passed on; one that does not fit fails the read with 503 OVERLOADED.
 */
export function meteredBody(payload: NodeJS.ReadableStream, reservation: BodyReservation): NodeJS.ReadableStream {
  const metered = new Transform({
    transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback) {
      if (!reservation.take(chunk.length)) return done(overloaded());
      done(null, chunk);
    },
  });
  payload.on('error', (error: Error) => metered.destroy(error));
  return payload.pipe(metered);
}
