import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../../support/fake-upstream.js';

let upstream: FakeUpstream;
beforeAll(async () => {
  upstream = await startFakeUpstream();
});
afterAll(() => upstream.close());

function post(
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
  signal?: AbortSignal,
): Promise<Response> {
  return fetch(upstream.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

describe('fake upstream options', () => {
  const streamed = { model: 'claude-x', max_tokens: 8, stream: true, messages: [{ role: 'user', content: 'hi' }] };

  it('when x-fake-delay-ms is set, then the response starts after it', async () => {
    const started = Date.now();
    await (await post('/v1/embeddings', { model: 'e', input: 'x' }, { 'x-fake-delay-ms': '60' })).json();
    expect(Date.now() - started).toBeGreaterThanOrEqual(55);
  });

  it('when x-fake-chunk-delay-ms is set, then SSE events are spaced by it', async () => {
    const started = Date.now();
    const text = await (await post('/v1/messages', streamed, { 'x-fake-chunk-delay-ms': '10' })).text();
    const events = text.split('\n\n').filter(Boolean).length;
    expect(events).toBeGreaterThan(5);
    expect(Date.now() - started).toBeGreaterThanOrEqual((events - 1) * 10 - 5);
  });

  it('when a route is unknown, then it answers 404 in the provider format and records the request', async () => {
    const response = await post('/v1/unknown?x=1', { a: 1 }, { 'x-trace': 't' });
    expect(response.status).toBe(404);
    expect(await response.json()).toMatchObject({ error: { type: 'invalid_request_error' } });
    expect(upstream.requests.at(-1)).toMatchObject({
      method: 'POST',
      path: '/v1/unknown?x=1',
      body: { a: 1 },
      headers: { 'x-trace': 't' },
    });
  });

  it('when the client hangs up mid-stream, then the server goes on serving', async () => {
    const controller = new AbortController();
    const response = await post('/v1/messages', streamed, { 'x-fake-chunk-delay-ms': '20' }, controller.signal);
    const reader = response.body?.getReader();
    await reader?.read();
    controller.abort();
    const next = await post('/v1/messages', { ...streamed, stream: false });
    expect(next.status).toBe(200);
  });
});
