/**
 * An answer given before the request's body arrived whole (a refusal decided from the headers:
 * no credential, a forged one, a full body budget) closes the connection. Kept open, Node would
 * go on reading and discarding whatever the client still sends, to reuse the connection: a 30 MB
 * upload with a made-up token would still cost its 30 MB of reading.
 */
import type { FastifyInstance } from 'fastify';

export function registerUnreadBodyClose(app: FastifyInstance) {
  app.addHook('onSend', async (request, reply) => {
    if (!request.raw.complete) void reply.header('connection', 'close');
  });
}
