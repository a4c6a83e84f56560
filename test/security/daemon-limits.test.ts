/**
 * The real daemon (a child process, under `ulimit -n 256`) against what an unauthenticated or
 * slow client can throw at it (issue #38): twenty parallel 30 MB uploads with a made-up proxy token,
 * stalled uploads and headers, and more connections than it has file descriptors.
 */
import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemonProcess, type DaemonProcess } from '../support/daemon-process.js';
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { rawConnection, requestHead, statusOf, type RawConnection } from '../support/raw-http.js';

const MiB = 1024 * 1024;
const CHAT = '/proxy/openai/v1/chat/completions';
const FORGED = `/proxy/t/rgp_${'A'.repeat(43)}/openai/v1/chat/completions`;
const OPEN_FILES = 256;

let upstream: FakeUpstream;
let daemon: DaemonProcess;

beforeAll(async () => {
  upstream = await startFakeUpstream();
  daemon = await startDaemonProcess({
    openFileLimit: OPEN_FILES,
    env: {
      RUNGUARD_OPENAI_UPSTREAM: upstream.url,
      RUNGUARD_REQUEST_TIMEOUT_MS: '2000',
      RUNGUARD_HEADERS_TIMEOUT_MS: '1000',
    },
  });
});
afterAll(async () => {
  await daemon?.close();
  await upstream?.close();
});

/** The daemon's resident set, in bytes. */
function rss(): number {
  const status = readFileSync(`/proc/${daemon.pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

/** A POST of `bytes` bytes of `a`, streamed from a generator; its status, or 'closed' when cut first. */
function upload(path: string, bytes: number): Promise<number | 'closed'> {
  return new Promise((resolve) => {
    const chunk = Buffer.alloc(64 * 1024, 'a');
    const body = Readable.from(
      (function* () {
        for (let sent = 0; sent < bytes; sent += chunk.length)
          yield bytes - sent >= chunk.length ? chunk : chunk.subarray(0, bytes - sent);
      })(),
    );
    const req = httpRequest(daemon.url + path, {
      method: 'POST',
      agent: false,
      headers: { 'content-type': 'application/json', 'content-length': bytes },
    });
    let settled = false;
    const done = (outcome: number | 'closed') => {
      if (settled) return;
      settled = true;
      resolve(outcome);
      body.destroy();
      req.destroy();
    };
    req.on('response', (res) => {
      res.resume();
      done(res.statusCode!);
    });
    req.on('error', () => done('closed'));
    body.pipe(req);
  });
}

/** One request on a connection of its own, closed after it (fetch would keep it for later). */
function call(
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(daemon.url + path, {
      method,
      agent: false,
      headers: { authorization: `Bearer ${daemon.apiKey}`, ...headers },
    });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('what an unauthenticated client can cost the real daemon', () => {
  it('when 20 parallel 30 MB uploads carry a made-up proxy token, then each is refused and the daemon stays within 50 MB of its idle RSS', async () => {
    // Idle: after a first request of each kind, so lazily loaded code is not counted as the attack's.
    expect((await upload(FORGED, 1024)) === 401).toBe(true);
    expect((await call('GET', '/health')).status).toBe(200);
    await new Promise((r) => setTimeout(r, 300));
    const idle = rss();
    let peak = idle;
    const sampler = setInterval(() => (peak = Math.max(peak, rss())), 10);
    let outcomes: (number | 'closed')[];
    try {
      outcomes = await Promise.all(Array.from({ length: 20 }, () => upload(FORGED, 30 * MiB)));
    } finally {
      clearInterval(sampler);
    }
    peak = Math.max(peak, rss());
    // Answered 401 (or, under the failed-auth limit, 429) before the body, or cut while sending it:
    // closed, or, on a machine so busy that the daemon read the head after this file's 2 s request
    // timeout, 408 (seen at load average 15). At least one must be the credential's refusal.
    for (const outcome of outcomes) expect([401, 429, 408, 'closed']).toContain(outcome);
    expect(outcomes.filter((o) => o === 401 || o === 429).length).toBeGreaterThan(0);
    expect(peak - idle).toBeLessThan(50 * MiB);
    expect(upstream.requests).toHaveLength(0);
    expect(daemon.running).toBe(true);
  });

  it('when a client stalls in its body or its headers, then the daemon cuts the connection with 408', async () => {
    const stalled: RawConnection[] = [
      // Authenticated calls, whose body the daemon waits for: the API and the proxy.
      await rawConnection(
        daemon.url,
        requestHead('POST', '/v1/runs', {
          authorization: `Bearer ${daemon.apiKey}`,
          'content-type': 'application/json',
          'content-length': 1000,
        }) + '{"user_id":',
      ),
      await rawConnection(
        daemon.url,
        requestHead('POST', CHAT, {
          'x-runguard-key': daemon.apiKey,
          'x-runguard-user-id': 'ada',
          'content-type': 'application/json',
          'content-length': 1000,
        }) + '{"model":',
      ),
      // Headers that never end.
      await rawConnection(daemon.url, 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nx-slow: '),
    ];
    for (const conn of stalled) {
      await conn.closed;
      expect(statusOf(conn.received())).toBe(408);
    }
    expect(upstream.requests).toHaveLength(0);
    expect((await call('GET', '/health')).status).toBe(200);
  });

  it('when clients hold more connections than the daemon has file descriptors, then /health and the API still answer, and all is well once they drop', async () => {
    const held: RawConnection[] = [];
    try {
      for (let i = 0; i < OPEN_FILES + 150; i++) held.push(await rawConnection(daemon.url));
      expect((await call('GET', '/health')).status).toBe(200);
      // The database pool still opens connections: the daemon kept descriptors for it.
      expect(
        (
          await call(
            'POST',
            '/v1/runs',
            { 'content-type': 'application/json' },
            JSON.stringify({ user_id: 'fd-during' }),
          )
        ).status,
      ).toBe(201);
    } finally {
      for (const conn of held) conn.socket.destroy();
    }
    expect(daemon.running).toBe(true);
    for (let i = 0; i < 20; i++) expect((await call('GET', '/health')).status).toBe(200);
    expect(
      (await call('POST', '/v1/runs', { 'content-type': 'application/json' }, JSON.stringify({ user_id: 'fd-after' })))
        .status,
    ).toBe(201);
    const proxied = await call(
      'POST',
      CHAT,
      {
        'x-runguard-key': daemon.apiKey,
        'x-runguard-user-id': 'ada',
        'content-type': 'application/json',
      },
      JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    );
    expect(proxied.status).toBe(200);
  });
});
