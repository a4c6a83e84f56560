/** Closing the HTTP server within a grace period: in-flight requests and streams may finish, then what is still open is cut. */
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';

/** `app.close()`, but connections still open after `graceMs` are cut. */
export async function closeWithin(app: FastifyInstance, graceMs: number, logger: Logger): Promise<void> {
  const closed = app.close();
  // A keep-alive connection whose last request finished after close began is idle now: close it
  // rather than wait for the client to (Node only closes the ones idle when close was called).
  const sweepIdle = setInterval(() => app.server.closeIdleConnections(), 50);
  void closed.finally(() => clearInterval(sweepIdle)).catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<'expired'>((resolve) => {
    timer = setTimeout(() => resolve('expired'), graceMs);
  });
  const outcome = await Promise.race([closed.then(() => 'closed' as const), expired]);
  clearTimeout(timer);
  if (outcome === 'expired') {
    logger.warn({ graceMs }, 'shutdown grace period over; closing the connections still open');
    app.server.closeAllConnections();
    await closed;
  }
}

/** `closing`, or a failure once `ms` have passed. */
export async function closedWithin(closing: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`the daemon did not finish closing within ${ms} ms`)), ms);
  });
  try {
    await Promise.race([closing, expired]);
  } finally {
    clearTimeout(timer);
  }
}
