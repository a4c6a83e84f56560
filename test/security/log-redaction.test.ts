/**
 * A run's proxy token and a runguard key never reach the log, however the URL spells them
 * (issue #48, item 4), and a key in a proxied call's query string is not forwarded upstream. The
 * real app on a socket, its log captured at the most verbose level.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loggedUrl } from '../../src/logger.js';
import { upstreamQuery } from '../../src/proxy/call-target.js';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';
import { captureLog } from '../support/log-capture.js';
import { rawConnection, requestHead, statusOf } from '../support/raw-http.js';

const MODEL = 'gpt-4o-mini';
const chat = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] });

let api: ProxyTestApi;
const log = captureLog('trace');

beforeAll(async () => {
  api = await startProxyTestApi('postgres+redis', { logger: log.logger });
});
afterAll(async () => {
  await api?.close();
});

async function tokenOfNewRun(): Promise<string> {
  const run = await api.request('POST', '/v1/runs', { user_id: 'agent-1' });
  const minted = await api.request('POST', `/v1/runs/${run.body.id}/proxy-token`);
  expect(minted.status).toBe(201);
  return minted.body.token as string;
}

/** Every spelling of `secret` a log line could hold: as is, its random part, percent-encoded. */
function spellings(secret: string): string[] {
  const random = secret.slice(secret.indexOf('_') + 1);
  return [secret, random, encodeURIComponent(secret), random.slice(0, 16), random.slice(-16)];
}

function expectNotLogged(secret: string, from: number) {
  const written = log.lines.slice(from).join('');
  for (const spelling of spellings(secret)) expect(written).not.toContain(spelling);
}

async function post(path: string, headers: Record<string, string> = {}): Promise<number> {
  const res = await fetch(`${api.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-provider', ...headers },
    body: chat,
  });
  await res.arrayBuffer();
  return res.status;
}

describe('a proxy token in the URL', () => {
  it('when the route is spelled in any way the router takes or refuses, then the token is never logged', async () => {
    const token = await tokenOfNewRun();
    const from = log.lines.length;
    const encoded = token.replace(/^rgp/, '%72%67%70');
    const cases: [string, number][] = [
      [`/proxy/t/${token}/openai/v1/chat/completions`, 200],
      [`/proxy/%74/${token}/openai/v1/chat/completions`, 200],
      [`/proxy/%74/${encoded}/openai/v1/chat/completions`, 200],
      [`/proxy/t/${token}/openai/v1/chat/completions?trace=${token}`, 200],
      [`/proxy//t/${token}/openai/v1/chat/completions`, 404],
      [`/Proxy/t/${token}/openai/v1/chat/completions`, 404],
      [`/proxy/T/${token}/openai/v1/chat/completions`, 404],
      [`/proxy/t/${token}`, 404],
      [`/%70roxy/t/${token}/openai/v1/chat/completions`, 200],
      [`/v1/runs/${token}`, 404],
    ];
    for (const [path, status] of cases) expect(await post(path), path).toBe(status);
    // The absolute form of a request target (RFC 9112 3.2.2), which fetch never sends.
    const raw = await rawConnection(
      api.url,
      requestHead('POST', `http://127.0.0.1/proxy/%74/${token}/openai/v1/chat/completions`, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(chat),
        connection: 'close',
      }) + chat,
    );
    await raw.closed;
    expect(statusOf(raw.received())).toBe(200);

    expectNotLogged(token, from);
    // The lines are there, with the route as parsed.
    const urls = log.lines.slice(from).map((line) => JSON.parse(line).req?.url as string | undefined);
    expect(urls).toContain('/proxy/t/[redacted]/openai/v1/chat/completions');
    expect(urls).toContain('/proxy/[redacted]');
  });
});

describe('a runguard key in a proxied call’s query string', () => {
  it('when an SDK puts the key in the query, then it is not forwarded and not logged; other parameters are', async () => {
    const run = await api.request('POST', '/v1/runs', { user_id: 'agent-1' });
    const base = `/proxy/runs/${run.body.id}/openai/v1/chat/completions`;
    const from = log.lines.length;
    const before = api.upstream.requests.length;
    const queries = [
      `?api_key=${api.apiKey}&api-version=2024-10-21`,
      `?api-version=2024-10-21&key=${encodeURIComponent(api.apiKey)}`,
      `?api-version=2024-10-21&x=${api.apiKey.replace('lg_', 'lg%5F')}`,
    ];
    for (const query of queries) expect(await post(base + query, { 'x-runguard-key': api.apiKey }), query).toBe(200);
    const sent = api.upstream.requests.slice(before).map((request) => request.path);
    expect(sent).toEqual(queries.map(() => '/v1/chat/completions?api-version=2024-10-21'));
    expectNotLogged(api.apiKey, from);
  });

  it('when the query holds only the key, then the upstream gets no query at all', () => {
    expect(upstreamQuery(`?api_key=${api.apiKey}`)).toBe('');
    expect(upstreamQuery('?a=1&b=lg_short')).toBe('?a=1&b=lg_short');
  });
});

describe('loggedUrl', () => {
  it('when an API path or query holds a key or token, or a credential-named parameter, then those are censored', () => {
    expect(loggedUrl({ url: '/v1/runs?user_id=u&token=t&page=2' })).toBe('/v1/runs?user_id=u&token=[redacted]&page=2');
    expect(loggedUrl({ url: '/v1/runs?user=lg_abc' })).toBe('/v1/runs?user=[redacted]');
    expect(loggedUrl({ url: '/v1/runs/abc' })).toBe('/v1/runs/abc');
    expect(loggedUrl({ url: '/v1/x/%6Cg_abc/y' })).toBe('/v1/x/[redacted]/y');
  });

  it('when a proxy path was parsed by its route, then it shows as parsed; unparsed, nothing past /proxy/', () => {
    const rest = { provider: 'openai', '*': 'v1/chat/completions' };
    expect(
      loggedUrl({ url: '/proxy/%74/rgp_x/openai/v1/chat/completions?key=abc', params: { ...rest, token: 'rgp_x' } }),
    ).toBe('/proxy/t/[redacted]/openai/v1/chat/completions');
    expect(loggedUrl({ url: '/proxy/runs/1/openai/v1/models?api-version=1', params: { ...rest, run_id: '1' } })).toBe(
      '/proxy/runs/1/openai/v1/chat/completions',
    );
    expect(loggedUrl({ url: '/proxy/openai/v1/chat/completions', params: rest })).toBe(
      '/proxy/openai/v1/chat/completions',
    );
    expect(loggedUrl({ url: '/Proxy/t/rgp_x/openai', params: { '*': 'whatever' } })).toBe('/proxy/[redacted]');
    expect(loggedUrl({ url: '/proxy//t/rgp_x' })).toBe('/proxy/[redacted]');
  });
});
