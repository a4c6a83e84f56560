/**
 * Every proxied MODEL_CALL step stores the upper bound of its cost (`steps.estimate_micros`,
 * migration 15) in every budget mode: what "reserve" mode reserves and what a lost result is
 * charged at (issue #34, parts 3 and 4).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

const MODEL = 'gpt-4o-mini';
const PRICES = { input_cost_per_token: 0.00001, output_cost_per_token: 0.00004 };

describe.each(BACKENDS)('step estimates on %s', (backend) => {
  let api: ProxyTestApi;

  beforeAll(async () => {
    api = await startProxyTestApi(backend);
    expect((await api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES)).status).toBe(200);
  });
  afterAll(async () => {
    await api?.close();
  });

  const call = async (path: string, body: object, user = 'estimated') => {
    const text = JSON.stringify(body);
    const res = await fetch(`${api.url}${path}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer sk',
        'x-runguard-key': api.apiKey,
        'x-runguard-user-id': user,
      },
      body: text,
    });
    await res.text();
    expect(res.status).toBe(200);
    return { stepId: res.headers.get('x-runguard-step-id')!, bytes: Buffer.byteLength(text) };
  };
  const estimateOf = async (stepId: string) => {
    const { rows } = await api.stores.db.query<{ estimate_micros: string | number | null }>(
      'SELECT estimate_micros FROM steps WHERE id = $1',
      [stepId],
    );
    return rows[0]!.estimate_micros === null ? null : Number(rows[0]!.estimate_micros);
  };

  it('when a run-less call sets max_tokens, then its step stores bytes x input price + max_tokens x output price', async () => {
    const body = { model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'Estimate me.' }] };
    const { stepId, bytes } = await call('/proxy/openai/v1/chat/completions', body);
    expect(await estimateOf(stepId)).toBe(bytes * 10 + 100 * 40);
  });

  it('when a call in a run sets no limit, then the model’s maximum output is priced', async () => {
    const runId = (await api.request('POST', '/v1/runs', { user_id: 'estimated' })).body.id;
    const body = { model: MODEL, messages: [{ role: 'user', content: 'No limit given.' }] };
    const { stepId, bytes } = await call(`/proxy/runs/${runId}/openai/v1/chat/completions`, body);
    expect(await estimateOf(stepId)).toBe(bytes * 10 + 16_384 * 40);
  });

  it('when the workspace is in reserve mode, then a proxied step stores the same estimate', async () => {
    const ws = await api.newWorkspace('scale');
    await ws.api.request('PUT', `/v1/model-pricing/${MODEL}`, PRICES);
    await ws.api.request('PATCH', '/v1/workspace', { budget_mode: 'reserve', daily_budget_usd: 100 });
    const body = { model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'Reserve me.' }] };
    const text = JSON.stringify(body);
    const res = await fetch(`${api.url}/proxy/openai/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer sk',
        'x-runguard-key': ws.apiKey,
        'x-runguard-user-id': 'reserver',
      },
      body: text,
    });
    await res.text();
    expect(res.status).toBe(200);
    expect(await estimateOf(res.headers.get('x-runguard-step-id')!)).toBe(Buffer.byteLength(text) * 10 + 100 * 40);
  });

  it('when the model has no price, then the step stores no estimate', async () => {
    const body = { model: 'llama3:8b', max_tokens: 10, messages: [{ role: 'user', content: 'Free?' }] };
    const { stepId } = await call('/proxy/openai/v1/chat/completions', body);
    expect(await estimateOf(stepId)).toBeNull();
  });
});
