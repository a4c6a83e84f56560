/**
 * The floor: the least a Node proxy on this stack can do. Fastify receives the request, undici
 * forwards it and streams the answer back. No auth, no guards, no records: whatever the daemon
 * costs beyond this is the price of guarding.
 */
import Fastify from 'fastify';
import { Pool } from 'undici';

const upstream = process.argv[2];
if (!upstream) throw new Error('usage: floor-proxy.ts <upstream base url>');
const pool = new Pool(upstream, { connections: 128, pipelining: 1 });

/** Hop-by-hop headers (RFC 9110 7.6.1) and the ones the server recomputes. */
const DROP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-connection', 'host', 'content-length']);

const app = Fastify({ logger: false, bodyLimit: 1024 * 1024 });
app.removeAllContentTypeParsers();
app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

app.all('/*', async (request, reply) => {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (value !== undefined && !DROP.has(name)) headers[name] = value;
  }
  const answer = await pool.request({
    method: request.method as 'POST',
    path: request.url,
    headers,
    body: (request.body as Buffer | undefined) ?? null,
  });
  reply.status(answer.statusCode);
  for (const [name, value] of Object.entries(answer.headers)) {
    if (value !== undefined && !DROP.has(name)) reply.header(name, value);
  }
  return reply.send(answer.body);
});

await app.listen({ host: '127.0.0.1', port: 0 });
const { port } = app.server.address() as { port: number };
process.stdout.write(`READY http://127.0.0.1:${port}\n`);
process.on('SIGTERM', () => void app.close().then(() => pool.close()).finally(() => process.exit(0)));
