/**
 * The floor: the least a Node proxy on this stack can do. Fastify receives the request, undici
 * forwards it and streams the answer back. No auth, no guards, no records: whatever the daemon
 * costs beyond this is the price of guarding.
 *
 * With `--io <database url> <redis url> <key prefix>`, the I/O floor: the same proxy, plus the
 * waits the rules put on every guarded call and nothing else. Before forwarding, one Redis
 * read (a decision's inputs), then one row inserted and committed in Postgres (the durable record),
 * group-committed as the daemon does it; after the answer, the row's result, batched the same way,
 * which the caller does not wait on. What the sidecar adds beyond this is the daemon's own work;
 * what this adds beyond the floor, any design that records before it forwards pays on this machine.
 */
import { randomUUID } from 'node:crypto';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import pg from 'pg';
import { Pool } from 'undici';
import { GroupCommit } from '../src/store/group-commit.js';
import { HOP_BY_HOP } from './lib/hop-by-hop.js';

const [upstream, ioFlag, databaseUrl, redisUrl, keyPrefix] = process.argv.slice(2);
if (!upstream || (ioFlag !== undefined && (ioFlag !== '--io' || !databaseUrl || !redisUrl || !keyPrefix))) {
  throw new Error('usage: floor-proxy.ts <upstream base url> [--io <database url> <redis url> <key prefix>]');
}
const pool = new Pool(upstream, { connections: 128, pipelining: 1 });

/** The I/O floor's two waits before forwarding, and its write after the answer. */
interface CallRecords {
  beforeForwarding(): Promise<string>;
  afterAnswer(id: string, status: number): void;
  close(): Promise<void>;
}

async function callRecords(databaseUrl: string, redisUrl: string, keyPrefix: string): Promise<CallRecords> {
  const db = new pg.Pool({ connectionString: databaseUrl, max: 4 });
  await db.query(`CREATE TABLE IF NOT EXISTS floor_io_calls (
    id uuid PRIMARY KEY, status int, created_at timestamptz NOT NULL, finished_at timestamptz)`);
  const redis = new Redis(redisUrl, { keyPrefix });
  // Named statements, as the daemon's: parsed and planned once per connection.
  const inserts = new GroupCommit<string, true>(async (ids) => {
    await db.query({
      name: 'insert',
      text: 'INSERT INTO floor_io_calls (id, created_at) SELECT unnest($1::uuid[]), now()',
      values: [ids],
    });
    return ids.map(() => true as const);
  });
  const results = new GroupCommit<{ id: string; status: number }, true>(
    async (rows) => {
      await db.query({
        name: 'finish',
        text: `UPDATE floor_io_calls c SET status = v.status, finished_at = now()
             FROM unnest($1::uuid[], $2::int[]) AS v(id, status) WHERE c.id = v.id`,
        values: [rows.map((r) => r.id), rows.map((r) => r.status)],
      });
      return rows.map(() => true as const);
    },
    { minIntervalMs: 10, minDelayMs: 4 },
  ); // as the daemon writes a proxied call's result
  return {
    async beforeForwarding() {
      await redis.mget('spend', 'state-version');
      const id = randomUUID();
      await inserts.submit(id);
      return id;
    },
    afterAnswer(id, status) {
      void results.submit({ id, status }).catch(() => {});
    },
    async close() {
      await inserts.settled();
      await results.settled();
      redis.disconnect();
      await db.end();
    },
  };
}

const records = ioFlag ? await callRecords(databaseUrl!, redisUrl!, keyPrefix!) : null;

const app = Fastify({ logger: false, bodyLimit: 1024 * 1024 });
app.removeAllContentTypeParsers();
app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

app.all('/*', async (request, reply) => {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
  }
  const callId = records ? await records.beforeForwarding() : null;
  const answer = await pool.request({
    method: request.method,
    path: request.url,
    headers,
    body: (request.body as Buffer | undefined) ?? null,
  });
  reply.status(answer.statusCode);
  for (const [name, value] of Object.entries(answer.headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) reply.header(name, value);
  }
  if (records && callId) answer.body.once('end', () => records.afterAnswer(callId, answer.statusCode));
  return reply.send(answer.body);
});

await app.listen({ host: '127.0.0.1', port: 0 });
const { port } = app.server.address() as { port: number };
process.stdout.write(`READY http://127.0.0.1:${port}\n`);
process.on(
  'SIGTERM',
  () =>
    void app
      .close()
      .then(() => pool.close())
      .then(() => records?.close())
      .finally(() => process.exit(0)),
);
