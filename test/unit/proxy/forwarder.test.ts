/**
 * Header hygiene of the forwarder, both ways: a table of what crosses and what does not; and the
 * framing of an answer it held.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import {
  clientHeaders,
  forward,
  upstreamFailure,
  upstreamHeaders,
  type RelayHooks,
  type Upstream,
} from '../../../src/proxy/forwarder.js';

describe('upstreamHeaders', () => {
  it('when a client request has hop-by-hop, guardrail and credential headers, then only end-to-end ones cross', () => {
    const out = upstreamHeaders({
      host: '127.0.0.1:8787',
      connection: 'keep-alive, X-Private-Hop',
      'keep-alive': 'timeout=5',
      'x-private-hop': '1',
      'transfer-encoding': 'chunked',
      te: 'trailers',
      trailer: 'x-checksum',
      upgrade: 'h2c',
      'proxy-authorization': 'Basic abc',
      'proxy-connection': 'keep-alive',
      'content-length': '12',
      expect: '100-continue',
      'accept-encoding': 'gzip, br',
      'x-runguard-key': 'lg_abcdefghijkl_secret',
      'x-runguard-user-id': 'u',
      authorization: 'Bearer sk-provider',
      'x-api-key': 'sk-ant',
      'api-key': 'azure',
      'anthropic-version': '2023-06-01',
      'content-type': 'application/json',
      'user-agent': 'OpenAI/JS 6',
      'x-stainless-retry-count': '0',
    });
    expect(out).toEqual({
      authorization: 'Bearer sk-provider',
      'x-api-key': 'sk-ant',
      'api-key': 'azure',
      'anthropic-version': '2023-06-01',
      'content-type': 'application/json',
      'user-agent': 'OpenAI/JS 6',
      'x-stainless-retry-count': '0',
      'accept-encoding': 'identity',
    });
  });

  it('when a guardrail key sits in a provider credential header by mistake, then it is not forwarded', () => {
    const out = upstreamHeaders({ authorization: 'Bearer lg_abcdefghijkl_0123456789abcdef0123456789abcdef' });
    expect(out.authorization).toBeUndefined();
  });
});

describe('clientHeaders', () => {
  it('when the upstream answers with hop-by-hop headers or cookies, then the client gets only end-to-end ones, no cookie', () => {
    expect(
      clientHeaders({
        connection: 'keep-alive, x-hop',
        'keep-alive': 'timeout=5',
        'transfer-encoding': 'chunked',
        'x-hop': '1',
        'content-type': 'text/event-stream',
        'x-request-id': 'req_1',
        'set-cookie': ['a=1', 'b=2'],
        'content-length': '10',
      }),
    ).toEqual({ 'content-type': 'text/event-stream', 'x-request-id': 'req_1', 'content-length': '10' });
  });
});

describe('upstreamFailure', () => {
  it.each([
    [{ code: 'UND_ERR_CONNECT_TIMEOUT' }, 504, 'UPSTREAM_TIMEOUT'],
    [{ code: 'UND_ERR_HEADERS_TIMEOUT' }, 504, 'UPSTREAM_TIMEOUT'],
    [{ code: 'ECONNREFUSED' }, 502, 'UPSTREAM_UNAVAILABLE'],
    [new Error('other side closed'), 502, 'UPSTREAM_UNAVAILABLE'],
  ])('when forwarding fails with %o, then %i %s', (error, status, code) => {
    expect(upstreamFailure(error)).toMatchObject({ status, code });
  });
});

describe('forward, held', () => {
  /** Relays through a pool that answers at once with `headers` and `chunks`, held until the whole answer is in. */
  async function relayedHead(headers: Record<string, string>, chunks: string[], status = 200, method = 'POST') {
    const pool: Upstream['pool'] = {
      dispatch(_options, handler) {
        const controller = { pause() {}, resume() {}, abort() {} } as unknown as Dispatcher.DispatchController;
        handler.onRequestStart?.(controller, {});
        handler.onResponseStart?.(controller, status, headers, 'OK');
        for (const chunk of chunks) handler.onResponseData?.(controller, Buffer.from(chunk));
        handler.onResponseEnd?.(controller, {});
        return true;
      },
    };
    const hooks: RelayHooks = { answered: (_status, upstream) => clientHeaders(upstream), chunk() {}, ended() {} };
    const server = createServer((_req, res) => {
      const request = { method, path: '/', headers: {}, body: null };
      forward({ origin: 'http://upstream', basePath: '', pool }, request, res, hooks, { held: true }).release();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const res = await fetch(`http://127.0.0.1:${port}/`, { method });
      return { headers: res.headers, body: await res.text() };
    } finally {
      server.close();
    }
  }

  it('when a held answer came whole without a length, then the client gets it with its length, not chunked', async () => {
    const { headers, body } = await relayedHead({ 'content-type': 'application/json' }, ['{"a":', '1}']);
    expect(headers.get('content-length')).toBe('7');
    expect(headers.get('transfer-encoding')).toBeNull();
    expect(body).toBe('{"a":1}');
  });

  it('when a held answer is a stream, a 204 or a HEAD, then no length is made up for it', async () => {
    const stream = await relayedHead({ 'content-type': 'text/event-stream' }, ['data: 1\n\n']);
    expect(stream.headers.get('content-length')).toBeNull();
    expect(stream.body).toBe('data: 1\n\n');
    expect((await relayedHead({}, [], 204)).headers.get('content-length')).toBeNull();
    expect(
      (await relayedHead({ 'content-type': 'application/json' }, [], 200, 'HEAD')).headers.get('content-length'),
    ).toBeNull();
  });
});
