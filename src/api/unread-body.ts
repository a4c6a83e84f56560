/**
 * An answer given before the request's body arrived whole (a refusal decided from the headers: no
 * credential, a forged one, a full body budget, a body over the limit) leaves the rest of the body
 * on the wire. Node would read and discard all of it to reuse the connection: a 30 MB upload with a
 * made-up token would still cost its 30 MB of reading. Closing the socket at once is no better for
 * an honest client: unread bytes make the kernel answer with a reset, which destroys the refusal
 * in the client's receive buffer before it is read, so the client sees a broken connection (and
 * retries) instead of a 401.
 *
 * So the rest is discarded (never held) for a short while, long enough for the client to read the
 * answer, and the connection is closed after LINGER_BYTES or LINGER_MS, whichever comes first (as
 * nginx's lingering close does). A body that ends within them leaves the connection reusable.
 */
import type { FastifyInstance } from 'fastify';

/** Bytes of an unread body discarded at most before the connection is closed. */
export const LINGER_BYTES = 4 * 1024 * 1024;
/** Time an unread body is discarded at most before the connection is closed. */
export const LINGER_MS = 2_000;

export function registerUnreadBodyLinger(app: FastifyInstance) {
  app.addHook('onSend', async (request, reply) => {
    const incoming = request.raw;
    if (incoming.complete) return;
    const socket = incoming.socket;
    // An answer that closes the connection (Fastify's 413 says `connection: close`, and so does a
    // client that sent it) makes Node close the socket as soon as the answer is written, with the
    // body still arriving: a reset. Its write side is closed instead (the client reads the answer,
    // then the end), and the socket once the body ended, or at the linger's cut.
    let closeWanted = false;
    socket.destroySoon = () => {
      closeWanted = true;
      if (!socket.writableEnded) socket.end();
    };
    let discarded = 0;
    // Not before the answer is flushed: a socket destroyed with it still queued would lose it.
    const cut = () => {
      clearTimeout(timer);
      if (reply.raw.writableFinished) socket.destroy();
      else reply.raw.once('finish', () => socket.destroy());
    };
    const timer = setTimeout(cut, LINGER_MS);
    timer.unref();
    // Read here, as 'data': Node's own discarding (for a body nobody read) counts nothing.
    incoming.on('data', (chunk: Buffer) => {
      discarded += chunk.length;
      if (discarded > LINGER_BYTES) cut();
    });
    incoming.once('end', () => {
      clearTimeout(timer);
      if (closeWanted) cut();
    });
    socket.once('close', () => clearTimeout(timer));
    incoming.resume();
  });
}
