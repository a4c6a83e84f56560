/**
 * Issue #50, bad input and the guarantees around it: malformed JSON-RPC answered 400 in JSON-RPC
 * form and never forwarded, an unknown server 404, a server that is down or silent named in the
 * agent's error with its step FAILED (and not charged), bounded bodies, unauthenticated requests
 * refused before their bodies are read, where MCP servers may be, and masked header secrets.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MCP_SUBJECT } from '../../src/api/app.js';
import { freePort } from '../support/daemon.js';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';
import { startMcpServer, type McpFixture } from '../support/mcp-fixture.js';
import { rawConnection, requestHead, statusOf } from '../support/raw-http.js';

const until = async (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(20);
  }
};

const toolsCall = (id: number, name: string, args: Record<string, unknown> = {}) =>
  JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

describe('MCP proxy: bad input and guarantees', () => {
  let api: ProxyTestApi;
  let server: McpFixture;
  /** A server that takes requests and never answers them. */
  let silent: Server;

  beforeAll(async () => {
    server = await startMcpServer();
    silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    api = await startProxyTestApi('postgres+redis', {
      proxy: { bodyLimitBytes: 64 * 1024 },
      mcp: {
        policy: { allowPrivate: true, ownPort: null, subject: MCP_SUBJECT },
        upstream: { headersTimeoutMs: 500, connectTimeoutMs: 1_000 },
      },
    });
    const down = `http://127.0.0.1:${await freePort()}/mcp`;
    const silentUrl = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/mcp`;
    for (const [name, url] of [
      ['fx', server.url],
      ['down', down],
      ['silent', silentUrl],
    ])
      expect((await api.request('POST', '/v1/mcp/servers', { name, url })).status).toBe(201);
    await api.request('PUT', '/v1/tool-pricing/*', { per_call_usd: 0.25 });
  });
  afterAll(async () => {
    await api?.close();
    await server?.close();
    silent?.closeAllConnections();
    await new Promise((resolve) => silent?.close(resolve));
  });

  const startRun = async () => (await api.request('POST', '/v1/runs', { user_id: 'eve' })).body.id as string;
  const post = (path: string, body: string, headers: Record<string, string> = {}) =>
    fetch(`${api.url}${path}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'x-runguard-key': api.apiKey,
        ...headers,
      },
      body,
    });
  const stepsOf = async (runId: string) =>
    (await api.request('GET', `/v1/runs/${runId}`)).body.steps as Record<string, any>[];

  it('when the body is not JSON, then a JSON-RPC parse error (400), and nothing is forwarded', async () => {
    const runId = await startRun();
    const res = await post(`/proxy/runs/${runId}/mcp/fx`, '{"jsonrpc": "2.0", "method": ');
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32700 } });
    expect(await stepsOf(runId)).toEqual([]);
  });

  it.each([
    ['a number', '42'],
    ['an empty batch', '[]'],
    ['no jsonrpc version', '{"id": 1, "method": "tools/call"}'],
    ['a method that is not a string', '{"jsonrpc": "2.0", "id": 1, "method": 7}'],
    ['an id that is an object', '{"jsonrpc": "2.0", "id": {}, "method": "tools/call"}'],
  ])('when the body is %s, then a JSON-RPC invalid request (400)', async (_what, body) => {
    const res = await post(`/mcp/fx`, body, { 'x-runguard-user-id': 'eve' });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
  });

  it('when the server name is unknown, then 404 in JSON-RPC form', async () => {
    const res = await post('/mcp/nope', toolsCall(1, 'echo'), { 'x-runguard-user-id': 'eve' });
    expect(res.status).toBe(404);
    const body = await res.json();
    expect(body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32000 } });
    expect(body.error.message).toContain('"nope"');
  });

  it('when the server is down, then the agent gets a JSON-RPC error naming it, and the step is FAILED without a charge', async () => {
    const runId = await startRun();
    const res = await post(`/proxy/runs/${runId}/mcp/down`, toolsCall(7, 'echo', { text: 'x' }));
    expect(res.status).toBe(502);
    const body = await res.json();
    expect(body).toMatchObject({ jsonrpc: '2.0', id: 7, error: { code: -32000 } });
    expect(body.error.message).toBe('The MCP server "down" could not be reached.');
    await until('the step finished', async () => (await stepsOf(runId))[0]?.status === 'FAILED');
    expect((await stepsOf(runId))[0]).toMatchObject({
      tool_name: 'down.echo',
      output_data: { error: 'UPSTREAM_UNAVAILABLE' },
      cost_usd: null,
    });
  });

  it('when the server does not answer in time, then the agent gets a JSON-RPC error saying so, and the step is FAILED', async () => {
    const runId = await startRun();
    const res = await post(`/proxy/runs/${runId}/mcp/silent`, toolsCall(8, 'echo'));
    expect(res.status).toBe(504);
    expect((await res.json()).error.message).toBe('The MCP server "silent" did not answer in time.');
    await until('the step finished', async () => (await stepsOf(runId))[0]?.status === 'FAILED');
    expect((await stepsOf(runId))[0]!.output_data).toEqual({ error: 'UPSTREAM_TIMEOUT' });
  });

  it('when the body is over the limit, then 413 in JSON-RPC form', async () => {
    const big = toolsCall(9, 'echo', { text: 'x'.repeat(100 * 1024) });
    const res = await post('/mcp/fx', big, { 'x-runguard-user-id': 'eve' });
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({ jsonrpc: '2.0', error: { data: { code: 'PAYLOAD_TOO_LARGE' } } });
  });

  it('when a request has no credential, then it is refused 401 before its body is read', async () => {
    // The head announces a body that never comes: the answer cannot wait for it.
    const connection = await rawConnection(
      api.url,
      requestHead('POST', '/mcp/fx', { 'content-type': 'application/json', 'content-length': 1000 }),
    );
    // From another machine's point of view no default key applies; none is configured here anyway.
    const answer = await connection.answered;
    expect(statusOf(answer)).toBe(401);
    expect(answer).toContain('"jsonrpc":"2.0"');
    connection.socket.destroy();
  });

  it('when servers are listed, then header values are masked', async () => {
    await api.request('POST', '/v1/mcp/servers', {
      name: 'secretive',
      url: server.url,
      headers: { Authorization: 'Bearer ghp_abcdefghijklmnop1234' },
    });
    const listed = (await api.request('GET', '/v1/mcp/servers')).body as {
      name: string;
      headers: Record<string, string>;
    }[];
    const secretive = listed.find((entry) => entry.name === 'secretive')!;
    expect(secretive.headers.authorization).toBe('********1234');
    expect(JSON.stringify(listed)).not.toContain('ghp_abcdefghijklmnop');
    expect((await api.request('DELETE', '/v1/mcp/servers/secretive')).status).toBe(204);
    expect((await api.request('DELETE', '/v1/mcp/servers/secretive')).status).toBe(404);
  });

  it('when a server name or URL is bad, then 422 or 400', async () => {
    expect((await api.request('POST', '/v1/mcp/servers', { name: 'Bad Name', url: server.url })).status).toBe(422);
    expect((await api.request('POST', '/v1/mcp/servers', { name: 'ftp', url: 'ftp://127.0.0.1/x' })).status).toBe(400);
  });
});

describe('MCP proxy: a daemon listening beyond loopback', () => {
  let api: ProxyTestApi;
  beforeAll(async () => {
    api = await startProxyTestApi('postgres+sql', {
      mcp: { policy: { allowPrivate: false, ownPort: null, subject: MCP_SUBJECT } },
    });
  });
  afterAll(async () => api?.close());

  it('when a server is on a loopback or private address, then it is refused unless RUNGUARD_MCP_ALLOW_PRIVATE', async () => {
    for (const url of [
      'http://127.0.0.1:9/mcp',
      'http://10.1.2.3/mcp',
      'http://[::1]:9/mcp',
      'http://169.254.169.254/latest',
    ]) {
      const res = await api.request('POST', '/v1/mcp/servers', { name: 'inside', url });
      expect(res.status).toBe(400);
      expect(res.body.detail).toContain('RUNGUARD_MCP_ALLOW_PRIVATE');
    }
  });
});
