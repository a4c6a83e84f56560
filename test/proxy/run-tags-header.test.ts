/**
 * `x-runguard-tags` (issue #51): a run-less proxied call tags the run it starts; a malformed header
 * is refused in the provider's error format, naming the header, before anything is forwarded; the
 * header never reaches the upstream.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProxyTestApi, type ProxyTestApi } from '../support/harness.js';

const chat = { model: 'gpt-4o-mini', messages: [{ role: 'user' as const, content: 'Tag me.' }] };

describe('x-runguard-tags on proxied calls', () => {
  let api: ProxyTestApi;
  beforeAll(async () => {
    api = await startProxyTestApi('postgres+redis');
  });
  afterAll(async () => {
    await api?.close();
  });

  const runless = (userId: string, tags: string) =>
    new OpenAI({
      baseURL: `${api.url}/proxy/openai/v1`,
      apiKey: 'sk-provider',
      maxRetries: 0,
      defaultHeaders: { 'x-runguard-key': api.apiKey, 'x-runguard-user-id': userId, 'x-runguard-tags': tags },
    });

  /** The user's runs, once each has ended (a run-less call's run ends after its answer). */
  async function endedRuns(userId: string): Promise<{ id: string; status: string; tags: Record<string, string> }[]> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const { items } = (await api.request('GET', `/v1/runs?user_id=${userId}`)).body;
      if (items.length > 0 && items.every((run: { status: string }) => run.status !== 'RUNNING')) return items;
      if (Date.now() > deadline) throw new Error(`the runs of ${userId} did not end: ${JSON.stringify(items)}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  it('when a run-less call carries the header, then its run has the tags and the upstream never sees the header', async () => {
    const before = api.upstream.requests.length;
    const { response } = await runless('tagged-call', ' project=search, team=growth,note=a%2Cb ')
      .chat.completions.create(chat)
      .withResponse();
    expect(response.status).toBe(200);
    const [run] = await endedRuns('tagged-call');
    expect(run).toMatchObject({ status: 'COMPLETED', tags: { project: 'search', team: 'growth', note: 'a,b' } });
    const forwarded = api.upstream.requests.slice(before);
    expect(forwarded).toHaveLength(1);
    expect(Object.keys(forwarded[0]!.headers).filter((name) => name.startsWith('x-runguard'))).toEqual([]);
    const listed = (await api.request('GET', '/v1/runs?tag=project:search&tag=note:a,b')).body;
    expect(listed.items.map((item: { id: string }) => item.id)).toEqual([run!.id]);
  });

  it('when the header is malformed, then the call is refused naming it, nothing is forwarded and no run started', async () => {
    const before = api.upstream.requests.length;
    const seventeen = Array.from({ length: 17 }, (_, i) => `k${i}=v`).join(',');
    for (const header of [
      'Project=search',
      'project',
      'project=',
      'a=1,a=2',
      seventeen,
      'project=%E0%A4%A',
      `x=${'v'.repeat(129)}`,
    ]) {
      const error = await runless('badly-tagged', header)
        .chat.completions.create(chat)
        .catch((caught: unknown) => caught);
      expect(error, header).toBeInstanceOf(OpenAI.BadRequestError);
      expect((error as InstanceType<typeof OpenAI.BadRequestError>).message).toContain('x-runguard-tags');
    }
    expect(api.upstream.requests.length).toBe(before);
    expect((await api.request('GET', '/v1/runs?user_id=badly-tagged')).body.total).toBe(0);
  });

  it('when a call into a named run carries the header, then the header is ignored: that run keeps its tags', async () => {
    const run = (await api.request('POST', '/v1/runs', { user_id: 'named', tags: { project: 'ads' } })).body;
    const client = new OpenAI({
      baseURL: `${api.url}/proxy/runs/${run.id}/openai/v1`,
      apiKey: 'sk-provider',
      maxRetries: 0,
      defaultHeaders: { 'x-runguard-key': api.apiKey, 'x-runguard-tags': 'project=search' },
    });
    expect((await client.chat.completions.create(chat).withResponse()).response.status).toBe(200);
    expect((await api.request('GET', `/v1/runs/${run.id}`)).body.tags).toEqual({ project: 'ads' });
  });

  it("when a tag budget is spent by run-less calls carrying its tag, then the next one is denied, other tags' are not", async () => {
    // Ten times the fake upstream's usage priced high: one call spends the budget whole.
    const prices = { input_cost_per_token: 0.01, output_cost_per_token: 0.01 };
    expect((await api.request('PUT', '/v1/model-pricing/gpt-4o-mini', prices)).status).toBe(200);
    const budget = await api.request('POST', '/v1/budgets', {
      scope: 'tag',
      subject: 'project:capped',
      period: 'day',
      limit_usd: 0.01,
    });
    expect(budget.status).toBe(201);
    expect(
      (await runless('capped-1', 'project=capped').chat.completions.create(chat).withResponse()).response.status,
    ).toBe(200);
    await endedRuns('capped-1');
    const before = api.upstream.requests.length;
    const denied = await runless('capped-2', 'project=capped,team=growth')
      .chat.completions.create(chat)
      .catch((caught: unknown) => caught);
    expect(denied).toBeInstanceOf(OpenAI.APIError);
    expect((denied as InstanceType<typeof OpenAI.APIError>).message).toContain('BUDGET_EXCEEDED');
    expect(api.upstream.requests.length).toBe(before);
    const [blocked] = (await api.request('GET', '/v1/runs?user_id=capped-2')).body.items;
    const detail = (await api.request('GET', `/v1/runs/${blocked.id}`)).body;
    // Rule 13 decides at run start too: the run-less call's run is refused before any step.
    expect(detail).toMatchObject({ status: 'BLOCKED', tags: { project: 'capped', team: 'growth' }, steps: [] });
    expect(detail.decision).toMatchObject({
      reason: 'BUDGET_EXCEEDED',
      detail: { budget_id: budget.body.id, scope: 'tag', subject: 'project:capped' },
    });
    // Another project's calls are not this budget's.
    expect(
      (await runless('capped-3', 'project=open').chat.completions.create(chat).withResponse()).response.status,
    ).toBe(200);
  });
});
