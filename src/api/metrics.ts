/**
 * HTTP metrics: request latency per route pattern, and the `/metrics` exposition. The route label
 * is Fastify's route pattern (`/v1/runs/:run_id`), never the raw URL: one series per route, and
 * no ids or proxy tokens in label values.
 */
import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../metrics.js';

export function registerMetrics(app: FastifyInstance, metrics: Metrics) {
  // A callback hook, not an async one: every request passes here, and a promise each is waste.
  app.addHook('onResponse', (request, reply, done) => {
    observeAnswer(metrics, request.method, request.routeOptions.url ?? 'unmatched', reply);
    done();
  });

  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    const { contentType, body } = await metrics.scrape();
    return reply.type(contentType).send(body);
  });
}

/** One answered request in the latency histogram, by its route's pattern. */
export function observeAnswer(
  metrics: Metrics,
  method: string,
  route: string,
  answer: { statusCode: number; elapsedTime: number },
): void {
  metrics.httpRequestSeconds.observe(
    { method, route, status_code: String(answer.statusCode) },
    answer.elapsedTime / 1000,
  );
}
