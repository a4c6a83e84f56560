/**
 * What a client without a valid credential can make the daemon hold (issue #38): a proxied call
 * is refused from its request line and headers before a byte of its body is read; the bodies held
 * across calls are bounded by a budget; failed authentication is rate-limited per address on
 * every route; a client that aborts its upload is not a database outage.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { caller, startTestApi, startProxyTestApi, type ProxyTestApi } from '../support/harness.js';
import { captureLog } from '../support/log-capture.js';
import { rawConnection, requestHead, statusOf } from '../support/raw-http.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const CHAT = '/proxy/openai/v1/chat/completions';
const FORGED_TOKEN = `rgp_${'A'.repeat(43)}`;
/** The daemon's one line for a client that left mid-request (src/api/client-abort.ts). */
const CLIENT_ABORT_MESSAGE = 'the client closed its connection before its request was complete';

let api: ProxyTestApi;
const log = captureLog('debug');

beforeAll(async () => {
  api = await startProxyTestApi('postgres+sql', {
    logger: log.logger,
    proxy: { bodyLimitBytes: MiB, bodyBudgetBytes: 1.5 * MiB },
  });
});
afterAll(async () => {
  await api?.close();
});

/** A chat body of exactly `bytes` bytes (JSON padded with spaces). */
function chatBody(bytes: number): Buffer {
  const json = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
  return Buffer.concat([Buffer.from(json), Buffer.alloc(bytes - json.length, ' ')]);
}

const proxyHeaders = (extra: Record<string, string | number> = {}) => ({
  'content-type': 'application/json',
  'x-runguard-key': api.apiKey,
  'x-runguard-user-id': 'ada',
  authorization: 'Bearer sk-up',
  ...extra,
});

describe('a proxied call is refused before its body is read', () => {
  it('when a forged proxy token or key announces a large body and sends none of it, then 401 comes at once and the connection is closed soon after', async () => {
    for (const [path, headers] of [
      [`/proxy/t/${FORGED_TOKEN}/openai/v1/chat/completions`, { 'content-type': 'application/json' }],
      [
        CHAT,
        {
          'content-type': 'application/json',
          'x-runguard-key': `lg_aaaaaaaaaaaa_${'b'.repeat(40)}`,
          'x-runguard-user-id': 'ada',
        },
      ],
      [CHAT, { 'content-type': 'application/json', 'x-runguard-user-id': 'ada' }],
    ] as const) {
      // 30 MB announced, none sent: an answer can only come from the headers.
      const conn = await rawConnection(api.url, requestHead('POST', path, { ...headers, 'content-length': 30 * MiB }));
      expect(statusOf(await conn.answered)).toBe(401);
      // The daemon does not wait for the 30 MB (src/api/unread-body.ts: it lingers 2 s at most).
      await conn.closed;
      conn.socket.destroy();
    }
    expect(api.upstream.requests).toHaveLength(0);
  });

  it('when an authenticated call reads its body whole, then its connection is kept alive as before', async () => {
    const body = JSON.stringify({ user_id: 'keep-alive' });
    const conn = await rawConnection(
      api.url,
      requestHead('POST', '/v1/runs', {
        authorization: `Bearer ${api.apiKey}`,
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      }) + body,
    );
    expect(statusOf(await conn.answered)).toBe(201);
    expect(conn.received().toLowerCase()).not.toContain('connection: close');
    const proxied = await fetch(api.url + CHAT, { method: 'POST', headers: proxyHeaders(), body: chatBody(1024) });
    expect(proxied.status).toBe(200);
    expect(proxied.headers.get('connection')).not.toBe('close');
    await proxied.arrayBuffer();
    conn.socket.destroy();
  });

  it('when a refused client goes on sending, then it reads its 401 whole and the daemon stops reading after a few MiB', async () => {
    const conn = await rawConnection(
      api.url,
      requestHead('POST', `/proxy/t/${FORGED_TOKEN}/openai/v1/chat/completions`, {
        'content-type': 'application/json',
        'content-length': 30 * MiB,
      }),
    );
    const chunk = Buffer.alloc(256 * KiB, 'a');
    let written = 0;
    while (!conn.socket.destroyed && written < 30 * MiB) {
      if (!conn.socket.write(chunk))
        await new Promise((r) => {
          conn.socket.once('drain', r);
          conn.socket.once('close', r);
        });
      written += chunk.length;
    }
    await conn.closed;
    expect(statusOf(conn.received())).toBe(401);
    expect(conn.received()).toContain('"code":"UNAUTHORIZED"');
    expect(written).toBeLessThan(30 * MiB);
  });

  it('when an unknown provider or a dot-segment path is asked for, then it is refused from the request line too', async () => {
    const unknown = await rawConnection(
      api.url,
      requestHead('POST', '/proxy/nope/v1/x', proxyHeaders({ 'content-length': MiB })),
    );
    expect(statusOf(await unknown.answered)).toBe(404);
    const climbing = await rawConnection(
      api.url,
      requestHead('POST', '/proxy/openai/%2e%2e/x', proxyHeaders({ 'content-length': MiB })),
    );
    expect(statusOf(await climbing.answered)).toBe(400);
    for (const conn of [unknown, climbing]) conn.socket.destroy();
  });
});

/** The proxy's body budget in use, from /metrics; null while the daemon does not say. */
async function bytesHeld(): Promise<number | null> {
  const text = await (await fetch(`${api.url}/metrics`)).text();
  const match = /^runguard_proxy_body_bytes_held (\d+)/m.exec(text);
  return match ? Number(match[1]) : null;
}

async function until(condition: () => Promise<boolean>): Promise<void> {
  while (!(await condition())) await new Promise((r) => setTimeout(r, 10));
}

describe('the bodies held across calls are bounded', () => {
  it('when calls announce more body bytes than the budget holds, then the one that does not fit is answered 503 OVERLOADED at once, and the bytes come back when a call ends', async () => {
    const sent = api.upstream.requests.length;
    // 1 MiB announced and held (a stalled upload) out of a 1.5 MiB budget.
    const holder = await rawConnection(api.url, requestHead('POST', CHAT, proxyHeaders({ 'content-length': MiB })));
    holder.socket.write(chatBody(MiB).subarray(0, 64 * KiB));
    await until(async () => (await bytesHeld()) === MiB);
    // A second 1 MiB call does not fit: refused without its body.
    const second = await rawConnection(api.url, requestHead('POST', CHAT, proxyHeaders({ 'content-length': MiB })));
    const refused = await second.answered;
    second.socket.destroy();
    expect(statusOf(refused)).toBe(503);
    expect(refused.toLowerCase()).toContain('retry-after: 1');
    expect(refused).toContain('"code":"OVERLOADED"');

    // Without a declared length (chunked), bytes are counted as they come: cut past what is left.
    const chunked = await fetch(api.url + CHAT, {
      method: 'POST',
      headers: proxyHeaders(),
      body: new Blob([chatBody(MiB)]).stream(),
      duplex: 'half',
    }).then(
      (res) => res.status,
      () => 'closed',
    );
    expect([503, 'closed']).toContain(chunked);
    expect(api.upstream.requests).toHaveLength(sent);

    // The held call ends (the client goes): its share is back, and a call of the same size goes through.
    holder.socket.destroy();
    await until(async () => (await bytesHeld()) === 0);
    const res = await fetch(api.url + CHAT, { method: 'POST', headers: proxyHeaders(), body: chatBody(MiB) });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(api.upstream.requests).toHaveLength(sent + 1);
    await until(async () => (await bytesHeld()) === 0);
  });
});

describe('failed authentication is rate-limited per address', () => {
  it('when an address fails authentication past the limit, then its failures get 429 on every route, API and proxy alike, until the window ends', async () => {
    const limited = await startTestApi('postgres+sql', {
      auth: { failedAuthPerMinute: 3 },
      proxy: { upstream: api.upstream.url },
    });
    try {
      const forged = caller(limited.url, `lg_aaaaaaaaaaaa_${'c'.repeat(40)}`);
      // Successes do not count.
      for (let i = 0; i < 5; i++) expect((await limited.request('GET', '/v1/runs')).status).toBe(200);
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await forged.request('GET', '/v1/runs')).status);
      expect(statuses).toEqual([401, 401, 401]);
      const api429 = await forged.request('GET', '/v1/workspace');
      expect(api429.status).toBe(429);
      expect(api429.body).toMatchObject({ code: 'RATE_LIMITED' });
      expect(Number(api429.headers.get('retry-after'))).toBeGreaterThan(0);
      // The proxy answers in the provider's format; a proxy token is not even looked up.
      const proxied = await fetch(`${limited.url}/proxy/t/${FORGED_TOKEN}/openai/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      expect(proxied.status).toBe(429);
      expect(((await proxied.json()) as { error: { code: string } }).error.code).toBe('RATE_LIMITED');
      // No credential at all is refused too; the health probe, which takes none, is answered.
      expect((await fetch(`${limited.url}/v1/runs`)).status).toBe(429);
      expect((await fetch(`${limited.url}/health`)).status).toBe(200);
    } finally {
      await limited.close();
    }
  });

  it('when an address is over its failures, then a valid credential from it is still served, and a forged one still is not', async () => {
    const limited = await startTestApi('postgres+sql', {
      auth: { failedAuthPerMinute: 3 },
      proxy: { upstream: api.upstream.url },
    });
    try {
      // A key and a proxy token in use, and a key issued but not used yet.
      expect((await limited.request('GET', '/v1/runs')).status).toBe(200);
      const run = (await limited.request('POST', '/v1/runs', { user_id: 'u' })).body;
      const token = (await limited.request('POST', `/v1/runs/${run.id}/proxy-token`)).body.token as string;
      // Relayed to the fake upstream, which has no model list: its 404 says the token got through.
      const models = `${limited.url}/proxy/t/${token}/openai/v1/models`;
      expect((await fetch(models)).status).toBe(404);
      const fresh = caller(
        limited.url,
        (await limited.request('POST', '/v1/api-keys', { name: 'fresh' })).body.api_key,
      );

      const forged = caller(limited.url, `lg_aaaaaaaaaaaa_${'c'.repeat(40)}`);
      for (let i = 0; i < 3; i++) expect((await forged.request('GET', '/v1/runs')).status).toBe(401);
      expect((await forged.request('GET', '/v1/runs')).status).toBe(429);

      // The credentials in use are served at once, on the API and the proxy.
      expect((await limited.request('GET', '/v1/runs')).status).toBe(200);
      expect((await fetch(models)).status).toBe(404);
      // A valid key this daemon has not seen yet gets in within the Retry-After it is told.
      const first = await fresh.request('GET', '/v1/runs');
      if (first.status !== 200) {
        expect(first.status).toBe(429);
        expect(Number(first.headers.get('retry-after'))).toBe(1);
        const deadline = Date.now() + 10_000;
        let status = 429;
        while (status === 429 && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 250));
          status = (await fresh.request('GET', '/v1/runs')).status;
        }
        expect(status).toBe(200);
      }
      // Once it has, it is served at once like the others.
      expect((await fresh.request('GET', '/v1/runs')).status).toBe(200);
      // A forged key is still refused without a lookup, however many valid calls went before.
      expect((await forged.request('GET', '/v1/workspace')).status).toBe(429);
    } finally {
      await limited.close();
    }
  });
});

describe('an aborted upload is the client leaving, not the database failing', () => {
  /** Starts an upload of `path` declaring 100 KB, sends a part, and resets the connection. */
  async function abortUpload(path: string, headers: Record<string, string>) {
    const conn = await rawConnection(
      api.url,
      requestHead('POST', path, { ...headers, 'content-type': 'application/json', 'content-length': 100_000 }),
    );
    conn.socket.write(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"${'x'.repeat(10_000)}`);
    await new Promise((r) => setTimeout(r, 50));
    conn.socket.resetAndDestroy();
  }

  it('when a client resets its connection half way through a body (API and proxy), then no 503 and nothing logged as an error', async () => {
    const from = log.lines.length;
    await abortUpload('/v1/runs', { authorization: `Bearer ${api.apiKey}` });
    await abortUpload(CHAT, proxyHeaders());
    // Wait until the daemon handled both (today's line for it, or the error line it used to write).
    const deadline = Date.now() + 30_000;
    const entries = () =>
      log.lines
        .slice(from)
        .map((line) => JSON.parse(line) as { level: number; msg: string; res?: { statusCode: number }; err?: unknown });
    while (
      entries().filter(
        (e) => e.msg === CLIENT_ABORT_MESSAGE || e.msg === 'request failed' || e.msg === 'proxy request failed',
      ).length < 2
    ) {
      if (Date.now() > deadline)
        throw new Error(`the aborted requests were not finished:\n${log.lines.slice(from).join('')}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const seen = entries();
    expect(seen.filter((e) => e.level >= 50)).toEqual([]);
    expect(seen.filter((e) => e.res?.statusCode === 503)).toEqual([]);
    expect(JSON.stringify(seen)).not.toContain('SERVICE_UNAVAILABLE');
    expect(api.upstream.requests.filter((r) => (r.rawBody ?? '').includes('x'.repeat(100)))).toEqual([]);
  }, 60_000);
});
