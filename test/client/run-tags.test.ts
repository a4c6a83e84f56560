/**
 * Tags through the TypeScript SDK (issue #51): `guard.run(user, fn, { tags })` starts a run that
 * carries them, the handle shows them, and over a bound the start fails with the daemon's 422.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APIError, GuardClient } from '../../clients/typescript/src/index.js';
import { startTestApi, type TestApi } from '../support/harness.js';

describe('run tags in the TypeScript SDK', () => {
  let api: TestApi;
  let guard: GuardClient;

  beforeAll(async () => {
    api = await startTestApi('postgres+redis');
    guard = new GuardClient({ apiKey: api.apiKey, baseUrl: api.url, maxRetries: 0 });
  });
  afterAll(async () => {
    await guard?.close();
    await api?.close();
  });

  it('when a run is given tags, then the daemon stores them, the handle shows them, and the list filters by them', async () => {
    const tags = { project: 'search', team: 'growth' };
    const run = await guard.run('sdk-tags', async (handle) => handle, { tags });
    expect(run.tags).toEqual(tags);
    expect((await api.request('GET', `/v1/runs/${run.id}`)).body).toMatchObject({ status: 'COMPLETED', tags });
    const untagged = await guard.run('sdk-tags', async (handle) => handle);
    expect(untagged.tags).toEqual({});
    const listed = await api.request('GET', '/v1/runs?tag=project:search&tag=team:growth&user_id=sdk-tags');
    expect(listed.body.items.map((item: { id: string }) => item.id)).toEqual([run.id]);
  });

  it('when a tag is over its bounds, then the start throws the 422 naming it and the function never runs', async () => {
    let ran = false;
    const error = await guard
      .run(
        'sdk-tags-bad',
        async () => {
          ran = true;
        },
        { tags: { project: 'x'.repeat(129) } },
      )
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(APIError);
    expect((error as APIError).status).toBe(422);
    expect((error as APIError).errors?.map((issue) => issue.path)).toEqual(['body.tags.project']);
    expect(ran).toBe(false);
    expect((await api.request('GET', '/v1/runs?user_id=sdk-tags-bad')).body.total).toBe(0);
  });
});
