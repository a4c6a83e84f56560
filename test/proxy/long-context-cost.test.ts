/**
 * Long-context prices (issue #52): a Gemini 2.5 Pro call through the proxy, driven by Google's SDK
 * against a loopback upstream, is priced at the catalog's standard prices with 200,000 prompt
 * tokens and, every token of it, at the long-context ones with 200,001; exactly, in the SQL that
 * stores a step's result, on each backend; the day's spend adds each cost rounded half-up to the
 * microdollar. In reserve mode, the call's estimate is the upper bound: a request big enough to
 * be long is checked at the long prices before anything goes upstream.
 */
import { GoogleGenAI } from '@google/genai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readShippedCatalog } from '../../src/money/shipped-catalog.js';
import { decimalText } from '../../src/money/decimal.js';
import { DEFAULT_REPLY, completionTokensFor, promptTokensFor } from '../support/fake-upstream.js';
import { BACKENDS, startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

const MODEL = 'gemini-2.5-pro';
const GOOGLE_KEY = 'AIzaSyFAKE-google-key-0123456789abcdef';
const CACHED = 50_000;
const REASONING = 7;
const completion = completionTokensFor(DEFAULT_REPLY) + REASONING;

/** Prices in nano-dollars per token (exact integers), as published: $1.25 / $10, cache reads $0.125; above 200k, $2.50 / $15 / $0.25. */
const NANO = {
  standard: { input: 1_250n, cacheRead: 125n, output: 10_000n },
  long: { input: 2_500n, cacheRead: 250n, output: 15_000n },
};

/** The cost computed here apart from the code under test: integers of nano-dollars, then decimal text. */
function expectedCost(prompt: number): string {
  const tier = prompt > 200_000 ? NANO.long : NANO.standard;
  const nano =
    BigInt(prompt - CACHED) * tier.input + BigInt(CACHED) * tier.cacheRead + BigInt(completion) * tier.output;
  const text = nano.toString().padStart(10, '0');
  return `${text.slice(0, -9)}.${text.slice(-9)}`.replace(/\.?0+$/, '');
}

/** Half-up to whole microdollars, from the decimal text. */
const micros = (cost: string) => {
  const [whole, fraction = ''] = cost.split('.');
  const digits = BigInt(whole! + fraction.padEnd(9, '0').slice(0, 9));
  return Number((digits + 500n) / 1_000n);
};

/** A prompt the fake upstream counts as exactly `tokens` tokens (4 characters each). */
function promptOf(tokens: number): string {
  for (let length = tokens * 4 - 8; length <= tokens * 4; length++) {
    const text = 'x'.repeat(length);
    if (promptTokensFor({ contents: [{ parts: [{ text }], role: 'user' }] }) === tokens) return text;
  }
  throw new Error(`no prompt of ${tokens} tokens`);
}

describe.each(BACKENDS)('long-context prices through the proxy (%s)', (backend) => {
  let api: ProxyTestApi;

  beforeAll(async () => {
    api = await startProxyTestApi(backend);
    // The shipped catalog's entry, as an import loads it.
    const entry = (await readShippedCatalog()).entries.find((e) => e.model === MODEL)!;
    const { is_active: _, ...prices } = entry;
    const imported = await api.request('POST', '/v1/model-pricing/import', { models: [prices] });
    expect(imported.status).toBe(200);
    const listed = (await api.request('GET', '/v1/model-pricing')).body.find((p: any) => p.model === MODEL);
    expect(listed.long_context).toEqual({
      above_prompt_tokens: 200_000,
      input_cost_per_token: 0.0000025,
      output_cost_per_token: 0.000015,
      cache_read_input_cost_per_token: 0.00000025,
      cache_write_input_cost_per_token: null,
    });
  });
  afterAll(() => api?.close());

  async function run(): Promise<{ runId: string; google: string }> {
    const created = await api.request('POST', '/v1/runs', { user_id: 'long-context' });
    const minted = await api.request('POST', `/v1/runs/${created.body.id}/proxy-token`);
    return { runId: created.body.id, google: minted.body.urls.google };
  }

  async function settledSteps(runId: string, count: number): Promise<any[]> {
    for (const deadline = Date.now() + 20_000; ;) {
      const { steps } = (await api.request('GET', `/v1/runs/${runId}`)).body;
      if (steps.length >= count && steps.every((s: any) => s.status !== 'ALLOWED')) return steps;
      if (Date.now() > deadline) throw new Error(`run ${runId} did not settle: ${JSON.stringify(steps)}`);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  it('when the prompt has 200,000 tokens, then the standard prices; 200,001: the long ones for every token', async () => {
    const { runId, google } = await run();
    const client = new GoogleGenAI({
      apiKey: GOOGLE_KEY,
      httpOptions: {
        baseUrl: google,
        headers: { 'x-fake-cached-tokens': String(CACHED), 'x-fake-reasoning-tokens': String(REASONING) },
      },
    });
    for (const tokens of [200_000, 200_001]) {
      const answer = await client.models.generateContent({ model: MODEL, contents: promptOf(tokens) });
      expect(answer.text).toBe(DEFAULT_REPLY);
    }
    const steps = await settledSteps(runId, 2);
    expect(steps.map((s) => [s.status, s.model, s.prompt_tokens, s.cache_read_tokens, s.completion_tokens])).toEqual([
      ['COMPLETED', MODEL, 200_000, CACHED, completion],
      ['COMPLETED', MODEL, 200_001, CACHED, completion],
    ]);
    const costs = steps.map((s) => decimalText(s.cost_usd));
    expect(costs).toEqual([expectedCost(200_000), expectedCost(200_001)]);
    // The long call costs far more than one more token would at the standard prices.
    expect(Number(costs[1])).toBeGreaterThan(1.5 * Number(costs[0]));
    const { rows } = await api.stores.db.query<{ spend: string | number }>(
      'SELECT sum(spend_micros) AS spend FROM usage_daily WHERE workspace_id = $1',
      [api.workspaceId],
    );
    expect(Number(rows[0]!.spend)).toBe(micros(costs[0]!) + micros(costs[1]!));
  });

  it('when reserve mode checks a request that may be long, then its estimate is priced at the long prices', async () => {
    // A request of about 800,100 bytes bounds its input at that many tokens, above 200,000: the
    // estimate is 800,100 x $2.50/M + 65,536 (Gemini 2.5's output bound) x $15/M, about $2.98;
    // at the standard prices it would be about $1.66. A day's budget of $2.50 lies between.
    const ws = await api.newWorkspace('scale');
    const entry = (await readShippedCatalog()).entries.find((e) => e.model === MODEL)!;
    const { is_active: _, ...prices } = entry;
    expect((await ws.api.request('POST', '/v1/model-pricing/import', { models: [prices] })).status).toBe(200);
    const patched = await ws.api.request('PATCH', '/v1/workspace', { budget_mode: 'reserve', daily_budget_usd: 2.5 });
    expect(patched.status).toBe(200);
    const sent = api.upstream.requests.length;
    const res = await fetch(`${api.url}/proxy/google/v1beta/models/${MODEL}:generateContent`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-goog-api-key': GOOGLE_KEY,
        'x-runguard-key': ws.apiKey,
        'x-runguard-user-id': 'reserve',
      },
      body: JSON.stringify({ contents: [{ parts: [{ text: promptOf(200_001) }], role: 'user' }] }),
    });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    expect(api.upstream.requests.length).toBe(sent);
    // Without the tier, the same request fits the budget (the standard prices' estimate).
    const { long_context: __, model: ___, ...standard } = prices;
    expect((await ws.api.request('PUT', `/v1/model-pricing/${MODEL}`, standard)).status).toBe(200);
    const again = await fetch(`${api.url}/proxy/google/v1beta/models/${MODEL}:generateContent`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-goog-api-key': GOOGLE_KEY,
        'x-runguard-key': ws.apiKey,
        'x-runguard-user-id': 'reserve',
      },
      body: JSON.stringify({ contents: [{ parts: [{ text: promptOf(200_001) }], role: 'user' }] }),
    });
    expect(again.status).toBe(200);
  });
});
