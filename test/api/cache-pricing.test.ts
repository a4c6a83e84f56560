/**
 * The API side of exact cost: cache prices on pricing entries, cache and reasoning tokens on
 * PATCH (refused when they do not add up), and the import endpoint that keeps entries set by hand.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type TestApi } from '../support/harness.js';

let api: TestApi;

beforeAll(async () => {
  api = await startTestApi('postgres+redis');
  await api.request('PUT', '/v1/model-pricing/claude-sonnet-4-5', {
    input_cost_per_token: 0.000003,
    output_cost_per_token: 0.000015,
    cache_read_input_cost_per_token: 0.0000003,
    cache_write_input_cost_per_token: 0.00000375,
  });
});
afterAll(() => api?.close());

async function step(): Promise<{ runId: string; stepId: string }> {
  const run = (await api.request('POST', '/v1/runs', { user_id: 'u' })).body;
  const created = (
    await api.request('POST', `/v1/runs/${run.id}/steps`, {
      type: 'MODEL_CALL',
      sequence: 1,
      model: 'claude-sonnet-4-5',
    })
  ).body;
  return { runId: run.id, stepId: created.id };
}

describe('pricing entries with cache prices', () => {
  it('when an entry is PUT with cache prices, then the list answers them and says it was set by hand', async () => {
    const list = (await api.request('GET', '/v1/model-pricing')).body;
    expect(list.find((p: any) => p.model === 'claude-sonnet-4-5')).toMatchObject({
      input_cost_per_token: 0.000003,
      cache_read_input_cost_per_token: 3e-7,
      cache_write_input_cost_per_token: 0.00000375,
      source: 'user',
    });
    const plain = await api.request('PUT', '/v1/model-pricing/plain', {
      input_cost_per_token: 1e-6,
      output_cost_per_token: 2e-6,
    });
    expect(plain.body).toMatchObject({ cache_read_input_cost_per_token: null, cache_write_input_cost_per_token: null });
    const negative = await api.request('PUT', '/v1/model-pricing/plain', {
      input_cost_per_token: 1e-6,
      output_cost_per_token: 2e-6,
      cache_read_input_cost_per_token: -1,
    });
    expect(negative.status).toBe(422);
  });
});

describe('pricing entries with a long-context tier', () => {
  it('when an entry is PUT with a tier, then the list answers it; a tier without its prices or threshold is refused', async () => {
    const tier = { above_prompt_tokens: 200_000, input_cost_per_token: 0.0000025, output_cost_per_token: 0.000015 };
    const put = await api.request('PUT', '/v1/model-pricing/tiered', {
      input_cost_per_token: 0.00000125,
      output_cost_per_token: 0.00001,
      long_context: tier,
    });
    expect(put.status).toBe(200);
    expect(put.body.long_context).toEqual({
      ...tier,
      cache_read_input_cost_per_token: null,
      cache_write_input_cost_per_token: null,
    });
    const plain = (await api.request('GET', '/v1/model-pricing')).body.find((p: any) => p.model === 'plain');
    expect(plain.long_context).toBeNull();
    for (const long_context of [
      { above_prompt_tokens: 200_000, input_cost_per_token: 0.0000025 },
      { input_cost_per_token: 0.0000025, output_cost_per_token: 0.000015 },
      { ...tier, above_prompt_tokens: -1 },
      { ...tier, above_prompt_tokens: 1.5 },
      { ...tier, extra: 1 },
    ]) {
      const refused = await api.request('PUT', '/v1/model-pricing/tiered', {
        input_cost_per_token: 0.00000125,
        output_cost_per_token: 0.00001,
        long_context,
      });
      expect(refused.status, JSON.stringify(long_context)).toBe(422);
    }
    // A PUT without a tier replaces the entry whole: the tier is gone.
    const untiered = await api.request('PUT', '/v1/model-pricing/tiered', {
      input_cost_per_token: 0.00000125,
      output_cost_per_token: 0.00001,
    });
    expect(untiered.body.long_context).toBeNull();
  });
});

describe('PATCH with cache and reasoning tokens', () => {
  it('when a step reports cache reads, writes and reasoning, then they are stored and priced at their prices', async () => {
    const { runId, stepId } = await step();
    const res = await api.request('PATCH', `/v1/runs/${runId}/steps/${stepId}`, {
      status: 'COMPLETED',
      prompt_tokens: 201_200,
      completion_tokens: 800,
      cache_read_tokens: 150_000,
      cache_write_tokens: 50_000,
      reasoning_tokens: 300,
    });
    expect(res.status).toBe(200);
    const detail = (await api.request('GET', `/v1/runs/${runId}`)).body;
    // 1,200 x 0.000003 + 150,000 x 0.0000003 + 50,000 x 0.00000375 + 800 x 0.000015 = 0.0036 + 0.045 + 0.1875 + 0.012.
    expect(detail.steps[0]).toMatchObject({
      prompt_tokens: 201_200,
      cache_read_tokens: 150_000,
      cached_prompt_tokens: 150_000,
      cache_write_tokens: 50_000,
      reasoning_tokens: 300,
      cost_usd: 0.2481,
    });
  });

  it('when the older cached_prompt_tokens is sent, then it is the cache reads', async () => {
    const { runId, stepId } = await step();
    await api.request('PATCH', `/v1/runs/${runId}/steps/${stepId}`, {
      status: 'COMPLETED',
      prompt_tokens: 1_000,
      completion_tokens: 0,
      cached_prompt_tokens: 1_000,
    });
    expect((await api.request('GET', `/v1/runs/${runId}`)).body.steps[0]).toMatchObject({
      cache_read_tokens: 1_000,
      cost_usd: 0.0003,
    });
  });

  it.each([
    [
      'cache tokens past the prompt',
      { prompt_tokens: 10, completion_tokens: 1, cache_read_tokens: 8, cache_write_tokens: 3 },
      'cache_write_tokens are parts of prompt_tokens',
    ],
    [
      'cache tokens without a prompt',
      { completion_tokens: 1, cache_read_tokens: 8 },
      'give prompt_tokens of at least their sum (8)',
    ],
    [
      'reasoning past the completion',
      { prompt_tokens: 10, completion_tokens: 5, reasoning_tokens: 6 },
      'reasoning_tokens are part of completion_tokens',
    ],
    [
      'two names that disagree',
      { prompt_tokens: 10, completion_tokens: 5, cache_read_tokens: 2, cached_prompt_tokens: 3 },
      'older name of cache_read_tokens',
    ],
  ])('when %s, then the PATCH is refused with 400 and the step stays ALLOWED', async (_label, counts, detail) => {
    const { runId, stepId } = await step();
    const res = await api.request('PATCH', `/v1/runs/${runId}/steps/${stepId}`, { status: 'COMPLETED', ...counts });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ code: 'BAD_REQUEST', detail: expect.stringContaining(detail) });
    expect((await api.request('GET', `/v1/runs/${runId}`)).body.steps[0].status).toBe('ALLOWED');
  });
});

describe('POST /v1/model-pricing/import', () => {
  const entry = (model: string, input: number) => ({
    model,
    input_cost_per_token: input,
    output_cost_per_token: input * 2,
  });

  it('when a dry run is asked, then it answers what would change and writes nothing', async () => {
    const res = await api.request('POST', '/v1/model-pricing/import', {
      models: [entry('dry-model', 1e-6)],
      dry_run: true,
    });
    expect(res.body).toMatchObject({
      new: 1,
      dry_run: true,
      items: [{ model: 'dry-model', change: 'new', before: null }],
    });
    expect((await api.request('GET', '/v1/model-pricing')).body.some((p: any) => p.model === 'dry-model')).toBe(false);
  });

  it('when an entry was set by hand, then it is kept unless overwrite; a catalog entry is replaced', async () => {
    await api.request('POST', '/v1/model-pricing/import', { models: [entry('cat-a', 1e-6), entry('cat-b', 1e-6)] });
    await api.request('PUT', '/v1/model-pricing/cat-b', { input_cost_per_token: 5e-6, output_cost_per_token: 5e-6 });
    const res = await api.request('POST', '/v1/model-pricing/import', {
      models: [entry('cat-a', 2e-6), entry('cat-b', 2e-6)],
    });
    expect(res.body).toMatchObject({
      changed: 1,
      kept: 1,
      items: [
        {
          model: 'cat-a',
          change: 'changed',
          before: { input_cost_per_token: 1e-6 },
          after: { input_cost_per_token: 2e-6, source: 'catalog' },
        },
        {
          model: 'cat-b',
          change: 'kept',
          before: { input_cost_per_token: 5e-6, source: 'user' },
          after: { input_cost_per_token: 5e-6, source: 'user' },
        },
      ],
    });
    const forced = await api.request('POST', '/v1/model-pricing/import', {
      models: [entry('cat-b', 2e-6)],
      overwrite: true,
    });
    expect(forced.body).toMatchObject({
      changed: 1,
      items: [{ after: { input_cost_per_token: 2e-6, source: 'catalog' } }],
    });
  });

  it('when an entry carries a field the API does not know, then the import is refused whole', async () => {
    const res = await api.request('POST', '/v1/model-pricing/import', {
      models: [{ ...entry('x', 1e-6), provider: 'openai' }],
    });
    expect(res.status).toBe(422);
  });
});
