/**
 * The barest floor: a `node:http` server and an undici pool, nothing between them. It reads the
 * request body whole (a chat request is small), forwards it, and pipes the answer back as it
 * comes. Beside the Fastify floor (`floor-proxy.ts`) it shows what Fastify itself costs a hop.
 */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pipeline } from 'node:stream/promises';
import { Pool } from 'undici';
import { HOP_BY_HOP } from './lib/hop-by-hop.js';

const [upstream] = process.argv.slice(2);
if (!upstream) throw new Error('usage: floor-http-proxy.ts <upstream base url>');
const pool = new Pool(upstream, { connections: 128, pipelining: 1 });

function forwardable(headers: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const kept: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) kept[name] = value;
  }
  return kept;
}

async function readBody(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

const server = createServer((request, response) => {
  void (async () => {
    const body = await readBody(request);
    const answer = await pool.request({
      method: request.method as 'POST',
      path: request.url ?? '/',
      headers: forwardable(request.headers),
      body: body.length ? body : null,
    });
    response.writeHead(answer.statusCode, forwardable(answer.headers));
    await pipeline(answer.body, response);
  })().catch(() => {
    if (!response.headersSent) response.writeHead(502).end();
    else response.destroy();
  });
});
server.keepAliveTimeout = 75_000;

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`READY http://127.0.0.1:${port}\n`);
});
process.on(
  'SIGTERM',
  () => void new Promise((resolve) => server.close(resolve)).then(() => pool.close()).finally(() => process.exit(0)),
);
