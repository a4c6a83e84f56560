/**
 * Run-less proxied calls free their concurrency slot when their answer is released (issue #34,
 * part 5): a run of a call's own is written ended a little after its answer, and until then it
 * must not count against max_concurrent_runs in the daemon that answered it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

const CLIENTS = 32;
const CALLS_EACH = 4;
const chat = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'One of many.' }] };

describe.each(BACKENDS)('run-less slots on %s', (backend) => {
  let api: ProxyTestApi;

  beforeAll(async () => {
    api = await startProxyTestApi(backend);
    expect((await api.request('PATCH', '/v1/workspace', { max_concurrent_runs: 40 })).status).toBe(200);
  });
  afterAll(async () => {
    await api?.close();
  });

  const headersOf = (user: string, key = api.apiKey) => ({
    'content-type': 'application/json',
    authorization: 'Bearer sk-provider',
    'x-runguard-key': key,
    'x-runguard-user-id': user,
  });

  it('when one client makes run-less calls one after another under a limit of 1, then none is refused', async () => {
    const ws = await api.newWorkspace('scale');
    expect((await ws.api.request('PATCH', '/v1/workspace', { max_concurrent_runs: 1 })).status).toBe(200);
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await fetch(`${api.url}/proxy/openai/v1/chat/completions`, {
        method: 'POST',
        headers: headersOf('solo', ws.apiKey),
        body: JSON.stringify(chat),
      });
      await res.text();
      statuses.push(res.status);
    }
    expect(statuses).toEqual(Array(10).fill(200));
  });

  it(`when ${CLIENTS} clients make run-less calls one after another under a limit of 40, then none is refused`, async () => {
    const statuses = new Map<number, number>();
    const client = async (n: number) => {
      const headers = headersOf(`agent-${n}`);
      for (let i = 0; i < CALLS_EACH; i++) {
        const res = await fetch(`${api.url}/proxy/openai/v1/chat/completions`, {
          method: 'POST',
          headers,
          body: JSON.stringify(chat),
        });
        await res.text();
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      }
    };
    await Promise.all(Array.from({ length: CLIENTS }, (_, n) => client(n)));
    expect(Object.fromEntries(statuses)).toEqual({ 200: CLIENTS * CALLS_EACH });
  }, 120_000);
});
