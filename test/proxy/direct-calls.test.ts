/**
 * A proxied model call with a declared body skips Fastify (src/proxy/direct-calls.ts); the same
 * call with a chunked body passes Fastify's routes and hooks. Both doors must answer alike: the
 * same status, body and headers, and the same metric series.
 */
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

let api: ProxyTestApi;
let runId: string;

beforeAll(async () => {
  api = await startProxyTestApi('postgres+redis');
  const prices = { input_cost_per_token: 0.000001, output_cost_per_token: 0.000004 };
  expect((await api.request('PUT', '/v1/model-pricing/gpt-4o-mini', prices)).status).toBe(200);
  runId = (await api.request('POST', '/v1/runs', { user_id: 'doors' })).body.id;
});
afterAll(async () => {
  await api?.close();
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A POST into the run, its body sent with a Content-Length (`declared`) or chunked. */
function call(
  body: string,
  declared: boolean,
  headers: Record<string, string> = {},
  base = `${api.url}/proxy/runs/${runId}/openai`,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'x-runguard-key': api.apiKey,
        'content-type': 'application/json',
        ...(declared ? { 'content-length': String(Buffer.byteLength(body)) } : {}),
        ...headers,
      },
    });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (chunk) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    if (declared) req.end(body);
    else {
      req.write(body); // without a length, Node sends it chunked
      req.end();
    }
  });
}

/** An answer's headers that differ from one call to the next by nature. */
function comparable(headers: Answer['headers']): Answer['headers'] {
  const {
    date: _date,
    'x-runguard-step-id': _step,
    'x-runguard-overhead-ms': _overhead,
    'transfer-encoding': _chunked,
    'content-length': _length,
    ...rest
  } = headers;
  return rest;
}

async function httpSeries(route: string, status: string): Promise<number> {
  const text = await (await fetch(`${api.url}/metrics`, { headers: { authorization: `Bearer ${api.apiKey}` } })).text();
  const line = text
    .split('\n')
    .find(
      (l) =>
        l.startsWith('runguard_http_request_duration_seconds_count{') &&
        l.includes(`route="${route}"`) &&
        l.includes(`status_code="${status}"`),
    );
  return line ? Number(line.split(' ').pop()) : 0;
}

const ROUTE = '/proxy/runs/:run_id/:provider/*';

describe('a call into a named run, through either door', () => {
  it('when its body is refused after it was read, then both answer the same, and count under the route', async () => {
    const before = await httpSeries(ROUTE, '400');
    const direct = await call('[1]', true, { 'x-request-id': 'req-doors-1' });
    const routed = await call('[1]', false, { 'x-request-id': 'req-doors-1' });
    expect(direct.status).toBe(400);
    expect(direct.body).toBe(routed.body);
    expect(JSON.parse(direct.body).error.code).toBe('INVALID_JSON');
    expect(comparable(direct.headers)).toEqual(comparable(routed.headers));
    expect(direct.headers['x-request-id']).toBe('req-doors-1');
    expect(direct.headers['x-content-type-options']).toBe('nosniff');
    expect(await httpSeries(ROUTE, '400')).toBe(before + 2);
  });

  it('when it is answered, then both relay the same headers and body, and count under the route', async () => {
    const body = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    const before = await httpSeries(ROUTE, '200');
    const direct = await call(body, true, { 'x-request-id': 'req-doors-2' });
    const routed = await call(body, false, { 'x-request-id': 'req-doors-2' });
    expect(direct.status).toBe(200);
    expect(routed.status).toBe(200);
    expect(Object.keys(comparable(direct.headers)).sort()).toEqual(Object.keys(comparable(routed.headers)).sort());
    expect(direct.headers['x-runguard-request-id']).toBe('req-doors-2');
    expect(direct.headers['x-content-type-options']).toBeUndefined();
    expect(JSON.parse(direct.body).choices).toEqual(JSON.parse(routed.body).choices);
    expect(await httpSeries(ROUTE, '200')).toBe(before + 2);
  });

  it('when its key is wrong, then it is answered 401 as the routes answer it, and counts as a failed authentication', async () => {
    const direct = await call('{}', true, { 'x-runguard-key': 'lg_aaaaaaaaaaaa_' + 'A'.repeat(32) });
    const routed = await call('{}', false, { 'x-runguard-key': 'lg_aaaaaaaaaaaa_' + 'A'.repeat(32) });
    expect(direct.status).toBe(401);
    expect(direct.body).toBe(routed.body);
    expect(Object.keys(comparable(direct.headers)).sort()).toEqual(Object.keys(comparable(routed.headers)).sort());
  });

  it("when it comes through a run's proxy token, then both doors relay it alike and count under the token's route", async () => {
    const minted = await api.request('POST', `/v1/runs/${runId}/proxy-token`);
    expect(minted.status).toBe(201);
    const base = minted.body.urls.openai.replace(/\/v1$/, '');
    const body = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    const route = '/proxy/t/:token/:provider/*';
    const before = await httpSeries(route, '200');
    const direct = await call(body, true, { 'x-request-id': 'req-doors-3' }, base);
    const routed = await call(body, false, { 'x-request-id': 'req-doors-3' }, base);
    expect([direct.status, routed.status]).toEqual([200, 200]);
    expect(Object.keys(comparable(direct.headers)).sort()).toEqual(Object.keys(comparable(routed.headers)).sort());
    expect(await httpSeries(route, '200')).toBe(before + 2);
    const bad = await call('[1]', true, {}, base);
    expect(bad.status).toBe(400);
    expect(bad.headers['x-content-type-options']).toBe('nosniff');
  });
});
