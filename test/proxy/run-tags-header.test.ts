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
});
