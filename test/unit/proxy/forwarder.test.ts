/** Header hygiene of the forwarder, both ways: a table of what crosses and what does not. */
import { describe, expect, it } from 'vitest';
import { clientHeaders, upstreamFailure, upstreamHeaders } from '../../../src/proxy/forwarder.js';

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
