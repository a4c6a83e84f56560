/**
 * A stopping daemon finishes in a bounded time, whatever it waits on (issue #54, item 2): the real
 * process, SIGTERM, and a peer that never answers. Each case held the daemon for its peer's own
 * timeout or forever before: an MCP server (the exchange read whole, 10 minutes of headers
 * timeout), an agent's WebSocket that never answers its close (30 s), a webhook receiver (the
 * attempt's timeout, up to 2 minutes), and a Postgres that stops answering (forever).
 */
import { connect, type Socket } from 'node:net';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { spawnDaemon, spawnDaemonOnPostgres, type SpawnedDaemon } from '../support/daemon.js';
import { caller } from '../support/harness.js';
import { startTcpRelay, type TcpRelay } from '../support/private-services.js';
import { createTestDatabase, type TestDatabase } from '../support/services.js';

const GRACE_MS = 500;
/** How long the close may take past the grace before it gives up (10 s by default). */
const AFTER_GRACE_MS = 2_000;
// The tests run at once (below): what they started is closed once all are done.
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
});

/** A server that takes every request (and WebSocket upgrade) and never answers. */
async function silentServer(): Promise<{ url: string; requests: () => number }> {
  const sockets = new Set<Socket>();
  let requests = 0;
  const server: Server = createServer(() => requests++);
  server.on('upgrade', () => requests++);
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests: () => requests };
}

/** Polls until `predicate` holds; the deadline only turns a hang into a named failure. */
async function waitFor(what: string, predicate: () => boolean | Promise<boolean>, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** SIGTERM, then how long until the process exits and with what (or 'still running' past `limitMs`). */
async function stopTimed(daemon: SpawnedDaemon, limitMs: number) {
  const started = Date.now();
  daemon.process.kill('SIGTERM');
  const exit = await Promise.race([
    daemon.exited,
    new Promise<string>((resolve) => setTimeout(() => resolve('still running'), limitMs)),
  ]);
  return { exit, ms: Date.now() - started };
}

async function onPostgres(env: Record<string, string>) {
  const daemon = await spawnDaemonOnPostgres({ env: { RUNGUARD_SHUTDOWN_GRACE_MS: String(GRACE_MS), ...env } });
  cleanups.push(() => daemon.close());
  cleanups.push(async () => daemon.process.kill('SIGKILL'));
  return daemon;
}

// Each case has a daemon, a database and a silent peer of its own, and spends most of its time
// waiting for a bound to pass (5 s for a WebSocket, 10 s past the grace for Postgres): all at once.
describe('a stopping daemon', { timeout: 90_000, concurrent: true }, () => {
  it('when an MCP server never answers a call the proxy reads whole, then the daemon still exits 0 just past its grace', async () => {
    const mcp = await silentServer();
    const daemon = await onPostgres({});
    const api = caller(daemon.url, daemon.apiKey);
    expect((await api.request('POST', '/v1/mcp/servers', { name: 'silent', url: `${mcp.url}/mcp` })).status).toBe(201);
    // A tool policy makes tools/list an exchange read whole (to filter it), not a relay.
    const policy = { tool_policy: { deny: ['silent.rm'], allow: null } };
    expect((await api.request('PATCH', '/v1/workspace', policy)).status).toBe(200);
    const call = fetch(`${daemon.url}/mcp/silent`, {
      method: 'POST',
      headers: {
        'x-runguard-key': daemon.apiKey!,
        'x-runguard-user-id': 'agent',
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    }).catch((error: Error) => error);
    await waitFor('the MCP server to hold the call', () => mcp.requests() === 1);
    const stopped = await stopTimed(daemon, 30_000);
    expect(stopped.exit).toBe(0);
    expect(stopped.ms).toBeLessThan(10_000);
    await call;
  });

  it("when an agent's WebSocket never answers the close, then the daemon cuts it and exits 0", async () => {
    // The provider takes the socket (ws answers its frames); the agent reads the 101 and nothing more.
    const { WebSocketServer } = await import('ws');
    const provider = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    cleanups.push(() => new Promise((resolve) => provider.close(resolve)));
    await new Promise((resolve) => provider.once('listening', resolve));
    const upstream = `http://127.0.0.1:${(provider.address() as AddressInfo).port}`;
    const relayed = await onPostgres({ RUNGUARD_OPENAI_UPSTREAM: upstream });
    const agent = connect(relayed.port, '127.0.0.1');
    cleanups.push(async () => agent.destroy());
    let answer = '';
    agent.on('data', (chunk: Buffer) => {
      answer += chunk.toString('latin1');
      agent.pause(); // never reads again: the daemon's close frame is never answered
    });
    agent.write(
      [
        'GET /proxy/openai/v1/responses HTTP/1.1',
        `Host: 127.0.0.1:${relayed.port}`,
        'Upgrade: websocket',
        'Connection: Upgrade',
        'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
        'Sec-WebSocket-Version: 13',
        `x-runguard-key: ${relayed.apiKey}`,
        'x-runguard-user-id: agent',
        'Authorization: Bearer sk-test',
        '',
        '',
      ].join('\r\n'),
    );
    await waitFor('the socket to open', () => answer.startsWith('HTTP/1.1 101'));
    const stopped = await stopTimed(relayed, 40_000);
    expect(stopped.exit).toBe(0);
    // ws waits 30 s for a close frame; the daemon waits 5.
    expect(stopped.ms).toBeLessThan(20_000);
  });

  it('when a webhook receiver never answers, then the attempt is called off at the grace and the daemon exits 0', async () => {
    const receiver = await silentServer();
    const daemon = await onPostgres({
      RUNGUARD_WEBHOOK_ALLOW_PRIVATE: 'true',
      RUNGUARD_WEBHOOK_TIMEOUT_MS: '60000',
      RUNGUARD_WEBHOOK_POLL_INTERVAL_MS: '50',
      RUNGUARD_WEBHOOK_SCAN_INTERVAL_MS: '100',
    });
    const api = caller(daemon.url, daemon.apiKey);
    const endpoint = { url: `${receiver.url}/hook`, events: ['guard.denied'] };
    expect((await api.request('POST', '/v1/webhooks', endpoint)).status).toBe(201);
    await api.request('POST', '/v1/workspace/kill-switch', { active: true });
    await api.request('POST', '/v1/runs', { user_id: 'denied' });
    await waitFor('the receiver to hold a delivery', () => receiver.requests() === 1);
    const stopped = await stopTimed(daemon, 75_000);
    expect(stopped.exit).toBe(0);
    // The attempt's own timeout is a minute.
    expect(stopped.ms).toBeLessThan(10_000);
    // Called off, not failed: it stays due for the next daemon.
    const deliveries = await createdDb(daemon.database).query(
      "SELECT attempts, status FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id WHERE e.type = 'guard.denied'",
    );
    expect(deliveries).toEqual([{ attempts: 0, status: 'pending' }]);
  });

  it('when Postgres stops answering, then the close gives up past its grace and the daemon exits 1, saying so', async () => {
    const database = await createTestDatabase();
    const relay: TcpRelay = await startTcpRelay(Number(new URL(database.url).port || 5432));
    cleanups.push(() => database.drop());
    cleanups.push(() => relay.close());
    const url = new URL(database.url);
    url.port = String(relay.port);
    const daemon = await spawnDaemon({
      databaseUrl: url.toString(),
      env: { RUNGUARD_SHUTDOWN_GRACE_MS: String(GRACE_MS), RUNGUARD_SHUTDOWN_AFTER_GRACE_MS: String(AFTER_GRACE_MS) },
    });
    cleanups.push(async () => daemon.process.kill('SIGKILL'));
    relay.silence();
    const stopped = await stopTimed(daemon, 40_000);
    expect(stopped.exit).toBe(1);
    // The grace, then 2 s for the last writes and the pools (10 s by default).
    expect(stopped.ms).toBeLessThan(GRACE_MS + AFTER_GRACE_MS + 10_000);
    expect(daemon.stdout()).toContain('the daemon did not finish closing within');
  });
});

/** A client of a test database, for a query or two. */
function createdDb(database: TestDatabase) {
  return {
    async query(sql: string) {
      const pg = (await import('pg')).default;
      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      try {
        return (await client.query(sql)).rows;
      } finally {
        await client.end();
      }
    },
  };
}
