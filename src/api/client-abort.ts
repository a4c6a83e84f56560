/**
 * A client that closes its connection while its body is read (an aborted upload) surfaces as an
 * `ECONNRESET` ("aborted") from the request stream: the same code a dead database connection
 * gives. Told apart by where it came from: Fastify's body reader tags the stream's errors with a
 * 4xx status, which a driver's socket error never carries.
 */
const SOCKET_CODES = new Set(['ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ERR_STREAM_PREMATURE_CLOSE']);

export const CLIENT_ABORT_MESSAGE = 'the client closed its connection before its request was complete';

export function isClientAbort(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, statusCode } = error as { code?: unknown; statusCode?: unknown };
  return (
    typeof code === 'string' &&
    SOCKET_CODES.has(code) &&
    typeof statusCode === 'number' &&
    statusCode >= 400 &&
    statusCode < 500
  );
}
