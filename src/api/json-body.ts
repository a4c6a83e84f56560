/**
 * The API's JSON body parser: Fastify's own, with refusals that say why. Fastify answers every
 * failure of its parser as invalid JSON, a key that could reach an object's prototype included,
 * though such a body is valid JSON; refused all the same (a parsed body must not carry one), it
 * gets a 422 that names the key.
 */
import type { FastifyInstance } from 'fastify';
import { parse } from 'secure-json-parse';
import { ApiError } from '../errors.js';

export function registerJsonBody(app: FastifyInstance) {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    const text = body as string;
    if (text === '') return done(new ApiError('INVALID_JSON'), undefined);
    try {
      done(null, parse(text, { protoAction: 'error', constructorAction: 'error' }));
    } catch (error) {
      done(
        /forbidden prototype property/.test((error as Error).message)
          ? new ApiError(
              'VALIDATION_FAILED',
              'JSON keys named "__proto__", or "constructor" holding "prototype", are refused.',
            )
          : new ApiError('INVALID_JSON'),
        undefined,
      );
    }
  });
}
