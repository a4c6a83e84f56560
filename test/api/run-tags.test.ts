/**
 * Tags on runs (issue #51): taken at a run's start, answered by its start, list and detail, the
 * list filtered by them; bounds refused with a 422 naming the field. Every backend.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, startTestApi, type Caller, type TestApi } from '../support/harness.js';

describe.each(BACKENDS)('run tags on %s', (backend) => {
  let api: TestApi;
  beforeAll(async () => {
    api = await startTestApi(backend);
  });
  afterAll(async () => {
    await api?.close();
  });

  const start = async (caller: Caller, body: Record<string, unknown>, headers: Record<string, string> = {}) => {
    const res = await caller.request('POST', '/v1/runs', { user_id: 'u', ...body }, headers);
    expect(res.status).toBe(201);
    return res.body;
  };
  const listed = async (caller: Caller, query: string) => {
    const res = await caller.request('GET', `/v1/runs?per_page=100${query}`);
    expect(res.status).toBe(200);
    return res.body as { items: { id: string; tags: Record<string, string> }[]; total: number };
  };

  it('when a run starts with tags, then its start, its detail and the list answer them; an untagged run answers {}', async () => {
    const ws = await api.newWorkspace();
    const tags = { project: 'search', team: 'growth', 'env.region_1-a': 'eu: west, 1 = ✓ 😀' };
    const tagged = await start(ws.api, { tags });
    expect(tagged).toMatchObject({ status: 'RUNNING', tags });
    const plain = await start(ws.api, {});
    expect(plain.tags).toEqual({});

    const detail = await ws.api.request('GET', `/v1/runs/${tagged.id}`);
    expect(detail.body.tags).toEqual(tags);
    expect((await ws.api.request('GET', `/v1/runs/${plain.id}`)).body.tags).toEqual({});

    const page = await listed(ws.api, '');
    expect(page.items.find((run) => run.id === tagged.id)?.tags).toEqual(tags);
    expect(page.items.find((run) => run.id === plain.id)?.tags).toEqual({});
  });

  it('when a run start is denied, then the BLOCKED run keeps its tags too', async () => {
    const ws = await api.newWorkspace();
    await api.setWorkspace({ daily_budget_micros: 0 }, ws.workspaceId);
    const blocked = await start(ws.api, { tags: { project: 'search' } });
    expect(blocked).toMatchObject({ status: 'BLOCKED', tags: { project: 'search' } });
    expect((await ws.api.request('GET', `/v1/runs/${blocked.id}`)).body.tags).toEqual({ project: 'search' });
  });

  it('when the list is filtered by tags, then it holds the runs carrying every one, counted in total', async () => {
    const ws = await api.newWorkspace();
    await api.setWorkspace({ max_concurrent_runs: null }, ws.workspaceId);
    const searchGrowth = await start(ws.api, { tags: { project: 'search', team: 'growth' } });
    const searchCore = await start(ws.api, { tags: { project: 'search', team: 'core' } });
    const ads = await start(ws.api, { tags: { project: 'ads', team: 'growth' } });
    const colon = await start(ws.api, { tags: { url: 'https://example.com:8080/x' } });
    await start(ws.api, {});

    const ids = (page: { items: { id: string }[] }) => page.items.map((run) => run.id).sort();
    const search = await listed(ws.api, '&tag=project:search');
    expect(ids(search)).toEqual([searchGrowth.id, searchCore.id].sort());
    expect(search.total).toBe(2);
    const both = await listed(ws.api, '&tag=project:search&tag=team:growth');
    expect(ids(both)).toEqual([searchGrowth.id]);
    expect(both.total).toBe(1);
    expect(ids(await listed(ws.api, '&tag=team:growth'))).toEqual([searchGrowth.id, ads.id].sort());
    // The value is everything after the first colon.
    expect(ids(await listed(ws.api, `&tag=${encodeURIComponent('url:https://example.com:8080/x')}`))).toEqual([
      colon.id,
    ]);
    // One key asked with two values: a run has one value a key, so none.
    expect(await listed(ws.api, '&tag=project:search&tag=project:ads')).toMatchObject({ items: [], total: 0 });
    expect(await listed(ws.api, '&tag=project:nothing')).toMatchObject({ items: [], total: 0 });
    // With the other filters.
    expect(ids(await listed(ws.api, '&tag=team:growth&status=RUNNING&user_id=u'))).toEqual(
      [searchGrowth.id, ads.id].sort(),
    );
    expect((await listed(ws.api, '&tag=team:growth&user_id=other')).total).toBe(0);
    // Another workspace's runs are never listed.
    expect((await listed(api, '&tag=project:search')).items.map((run) => run.id)).not.toContain(searchGrowth.id);
  });

  it('when tags are over their bounds, then the start is a 422 naming the field, and no run is written', async () => {
    const ws = await api.newWorkspace();
    const refused = async (tags: unknown) => {
      const res = await ws.api.request('POST', '/v1/runs', { user_id: 'u', tags });
      expect(res.status).toBe(422);
      expect(res.body.code).toBe('VALIDATION_FAILED');
      return (res.body.errors as { path: string; message: string }[]).map((error) => error.path);
    };
    const seventeen = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']));
    expect(await refused(seventeen)).toEqual(['body.tags']);
    expect(await refused({ Project: 'x' })).toEqual(['body.tags.Project']);
    expect(await refused({ 'a:b': 'x' })).toEqual(['body.tags.a:b']);
    expect(await refused({ ['k'.repeat(65)]: 'x' })).toEqual([`body.tags.${'k'.repeat(65)}`]);
    expect(await refused({ project: '' })).toEqual(['body.tags.project']);
    expect(await refused({ project: 'x'.repeat(129) })).toEqual(['body.tags.project']);
    expect(await refused({ project: 'a\nb' })).toEqual(['body.tags.project']);
    expect(await refused({ project: 5 })).toEqual(['body.tags.project']);
    expect(await refused(['project:search'])).toEqual(['body.tags']);
    const named = await ws.api.request('POST', '/v1/runs', { user_id: 'u', tags: { Project: 'x' } });
    expect(named.body.errors[0].message).toMatch(/tag key/);
    // The bounds themselves are taken: 16 pairs, a 64-character key, a 128-character value.
    const sixteen = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`k${i}`, 'v']));
    await start(ws.api, { tags: sixteen });
    await start(ws.api, { tags: { ['k'.repeat(64)]: '😀'.repeat(128) } });
    expect((await listed(ws.api, '')).total).toBe(2);
  });

  it('when a tag filter is malformed, then the list is a 422 naming it', async () => {
    for (const filter of ['project', 'Project:x', 'project:', `project:${'x'.repeat(129)}`]) {
      const res = await api.request('GET', `/v1/runs?tag=${encodeURIComponent(filter)}`);
      expect(res.status).toBe(422);
      expect(res.body.errors.map((error: { path: string }) => error.path)).toEqual(['query.tag.0']);
    }
    const second = await api.request('GET', '/v1/runs?tag=project:x&tag=bad');
    expect(second.status).toBe(422);
    expect(second.body.errors[0].path).toBe('query.tag.1');
  });

  it('when a tagged start is replayed with its Idempotency-Key, then the replay answers the same tags', async () => {
    const ws = await api.newWorkspace();
    const headers = { 'idempotency-key': 'tagged-start' };
    const tags = { project: 'search', team: 'growth' };
    const first = await start(ws.api, { tags }, headers);
    const again = await start(ws.api, { tags }, headers);
    expect(again).toEqual(first);
    expect(again.tags).toEqual(tags);
    const other = await ws.api.request('POST', '/v1/runs', { user_id: 'u', tags: { project: 'ads' } }, headers);
    expect(other.status).toBe(422);
    expect(other.body.code).toBe('IDEMPOTENCY_KEY_REUSED');
  });
});
