/**
 * A loopback daemon is not a web page's to call (issue #48, item 2): a request for a host name the
 * daemon does not serve (DNS rebinding) gets 421, a browser request from another site's page gets
 * 403 on the API and the proxy, and neither reaches the upstream. Clients that are not browsers,
 * and the daemon's own dashboard, are unaffected. The real app on a socket with the loopback
 * defaults (its own key stands in, a default user), a real Chromium, a fake upstream.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM } from '../support/browser.js';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';
import { rawConnection, requestHead, statusOf } from '../support/raw-http.js';

const CHAT = '/proxy/openai/v1/chat/completions';
const chat = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });

let api: ProxyTestApi;
/** Serves the same daemon's tests an allowed origin and an allowed host. */
let open: ProxyTestApi;
let evil: { server: Server; origin: string };
let browser: Browser;

/** A page of another site: a form that posts JSON as text/plain to `action`, as any site can. */
function evilPage(action: string): string {
  const [name, value] = [chat.slice(0, -1) + ',"x":"', '"}'];
  return `<!doctype html><form id="f" method="POST" enctype="text/plain" action="${action}">
    <input type="hidden" name='${name}' value='${value}'></form>`;
}

beforeAll(async () => {
  const loopbackDefaults = { workspaceKeyAsDefault: true, defaultUserId: 'local-user' };
  api = await startProxyTestApi('postgres+redis', { proxy: loopbackDefaults });
  const server = createServer((req, res) => {
    const target = new URL(req.url ?? '/', 'http://x').searchParams.get('to') ?? '';
    res.writeHead(200, { 'content-type': 'text/html' }).end(evilPage(target));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  evil = { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
  open = await startProxyTestApi('postgres+redis', {
    proxy: loopbackDefaults,
    publicUrl: 'https://guard.example.com',
    origins: { allowedOrigins: [evil.origin], allowedHosts: ['runguard.internal'] },
  });
  // `evil.test` resolves to this machine, as a rebinding DNS server would make it.
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--host-resolver-rules=MAP evil.test 127.0.0.1'],
  });
});
afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => evil?.server.close(resolve));
  await api?.close();
  await open?.close();
});

/** A request with any Host header, written by hand (fetch writes its own). */
async function withHost(base: string, method: string, path: string, host: string, body?: string): Promise<string> {
  const headers: Record<string, string | number> = { host, connection: 'close' };
  if (body !== undefined) Object.assign(headers, { 'content-type': 'application/json', 'content-length': body.length });
  const conn = await rawConnection(base, requestHead(method, path, headers) + (body ?? ''));
  await conn.closed;
  return conn.received();
}

const port = (base: string) => new URL(base).port;

describe('the Host a request names', () => {
  it('when it names a host the daemon does not serve, then 421 everywhere, nothing forwarded', async () => {
    const before = api.upstream.requests.length;
    for (const host of ['evil.example', `evil.example:${port(api.url)}`, 'localhost.evil.example', '10.1.2.3', 'a@b']) {
      for (const [method, path, body] of [
        ['POST', CHAT, chat],
        ['POST', '/v1/auth/register', JSON.stringify({ email: 'x@example.com', password: 'long password 1' })],
        ['GET', '/', undefined],
      ] as const) {
        const answer = await withHost(api.url, method, path, host, body);
        expect(statusOf(answer), `${host} ${path}`).toBe(421);
        expect(answer, `${host} ${path}`).toContain('MISDIRECTED_REQUEST');
      }
    }
    expect(api.upstream.requests.length).toBe(before);
  });

  it('when it names a loopback name or address, then it is served', async () => {
    for (const host of [
      'localhost',
      `localhost:${port(api.url)}`,
      '127.0.0.1',
      '127.9.9.9:1',
      '[::1]',
      'app.localhost',
    ]) {
      expect(statusOf(await withHost(api.url, 'POST', CHAT, host, chat)), host).toBe(200);
    }
  });

  it('when it names the public URL’s host or an allowed host, then it is served; others still are not', async () => {
    for (const host of ['guard.example.com', 'GUARD.example.com.', 'runguard.internal:8787', '127.0.0.1']) {
      expect(statusOf(await withHost(open.url, 'GET', '/v1/runs', host)), host).not.toBe(421);
    }
    expect(statusOf(await withHost(open.url, 'GET', '/v1/runs', 'other.example.com'))).toBe(421);
  });

  it('when a browser page is rebound to 127.0.0.1 under another name, then it reads nothing', async () => {
    const page = await browser.newPage();
    try {
      const res = await page.goto(`http://evil.test:${port(api.url)}/`);
      expect(res?.status()).toBe(421);
      const proxied = await page.evaluate(async (body) => {
        const answer = await fetch('/proxy/openai/v1/chat/completions', { method: 'POST', body });
        return answer.status;
      }, chat);
      expect(proxied).toBe(421);
    } finally {
      await page.close();
    }
  });
});

describe('a browser request from another site', () => {
  async function call(base: string, path: string, headers: Record<string, string>, key?: string) {
    const res = await fetch(base + path, {
      method: 'POST',
      headers: {
        'content-type': path === CHAT ? 'text/plain' : 'application/json',
        ...(key ? { authorization: `Bearer ${key}` } : {}),
        ...headers,
      },
      body: path === CHAT ? chat : JSON.stringify({ user_id: 'u' }),
    });
    return { status: res.status, body: (await res.json()) as any };
  }

  it('when its Origin is another site’s, then 403 on the API and the proxy, nothing forwarded', async () => {
    const before = api.upstream.requests.length;
    for (const origin of ['https://evil.example', 'null', `http://127.0.0.1:${Number(port(api.url)) + 1}`]) {
      const proxied = await call(api.url, CHAT, { origin });
      expect(proxied.status, origin).toBe(403);
      expect(proxied.body.error.code, origin).toBe('CROSS_SITE_REFUSED');
      const run = await call(api.url, '/v1/runs', { origin }, api.apiKey);
      expect(run.status, origin).toBe(403);
      expect(run.body.code, origin).toBe('CROSS_SITE_REFUSED');
    }
    expect(api.upstream.requests.length).toBe(before);
  });

  it('when it has no Origin but says it is cross-site or same-site, then 403 too', async () => {
    for (const site of ['cross-site', 'same-site']) {
      expect((await call(api.url, CHAT, { 'sec-fetch-site': site })).status, site).toBe(403);
    }
    expect((await call(api.url, CHAT, { 'sec-fetch-site': 'same-origin' })).status).toBe(200);
    expect((await call(api.url, CHAT, { 'sec-fetch-site': 'none' })).status).toBe(200);
  });

  it('when it comes from the daemon’s own origin, or from no browser at all, then it is served', async () => {
    expect((await call(api.url, CHAT, { origin: api.url })).status).toBe(200);
    expect((await call(api.url, CHAT, {})).status).toBe(200);
    expect((await call(api.url, '/v1/runs', { origin: api.url }, api.apiKey)).status).toBe(201);
    expect((await call(open.url, '/v1/runs', { origin: 'https://guard.example.com' }, open.apiKey)).status).toBe(201);
  });

  it('when a real page of another site posts a text/plain form to the proxy, then Chromium gets 403 and the upstream nothing', async () => {
    const before = api.upstream.requests.length;
    const page = await browser.newPage();
    try {
      await page.goto(`${evil.origin}/?to=${encodeURIComponent(api.url + CHAT)}`);
      const [answer] = await Promise.all([page.waitForNavigation(), page.evaluate(() => document.forms[0]!.submit())]);
      expect(answer?.status()).toBe(403);
      expect(await page.content()).toContain('CROSS_SITE_REFUSED');
    } finally {
      await page.close();
    }
    expect(api.upstream.requests.length).toBe(before);
  });

  it('when the page’s origin is allowed, then the same form is served', async () => {
    const before = open.upstream.requests.length;
    const page = await browser.newPage();
    try {
      await page.goto(`${evil.origin}/?to=${encodeURIComponent(open.url + CHAT)}`);
      const [answer] = await Promise.all([page.waitForNavigation(), page.evaluate(() => document.forms[0]!.submit())]);
      expect(answer?.status()).toBe(200);
    } finally {
      await page.close();
    }
    expect(open.upstream.requests.length).toBe(before + 1);
    // Allowed origins are trusted with fetch metadata alone too.
    expect((await call(open.url, CHAT, { 'sec-fetch-site': 'cross-site' })).status).toBe(200);
  });
});
