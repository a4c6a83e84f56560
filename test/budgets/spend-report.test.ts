/**
 * Spend reports (issue #51, item 6): `GET /v1/usage/report` between two local dates of the
 * workspace's time zone, grouped by user, key, model or day, as JSON and as CSV. On every backend,
 * with a test clock moved across New York's midnight.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, caller, startTestApi, type Caller, type TestApi } from '../support/harness.js';

const PRICED = 'gpt-4o-mini';
const UNPRICED = 'house-model-7';
// Prices whose per-step costs are not whole cents: a float sum of them would drift.
const PRICES = { input_cost_per_token: 0.0000013, output_cost_per_token: 0.0000071 };

describe.each(BACKENDS)('spend reports on %s', (backend) => {
  let api: TestApi;
  let now = new Date('2026-03-09T12:00:00Z');

  beforeAll(async () => {
    api = await startTestApi(backend, { clock: { now: () => now } });
  });
  afterAll(async () => {
    await api?.close();
  });

  let sequence = 0;
  /** A finished step at `at`: a model call with tokens, or a tool call. */
  async function step(ws: Caller, runId: string, at: string, model: string | null, tokens = 0) {
    now = new Date(at);
    const created = await ws.request('POST', `/v1/runs/${runId}/steps`, {
      type: model === null ? 'TOOL_CALL' : 'MODEL_CALL',
      model,
      tool_name: model === null ? 'search' : null,
      sequence: ++sequence,
    });
    expect(created.body.status).toBe('ALLOWED');
    const finished = await ws.request('PATCH', `/v1/runs/${runId}/steps/${created.body.id}`, {
      status: 'COMPLETED',
      ...(model === null ? {} : { prompt_tokens: tokens, completion_tokens: tokens + 7 }),
    });
    expect(finished.status).toBe(200);
  }

  const report = (ws: Caller, query: string, headers: Record<string, string> = {}) =>
    ws.request('GET', `/v1/usage/report?${query}`, undefined, headers);

  /** A New York workspace with calls on each side of local midnight, by two users and two keys. */
  async function newYorkWorkspace() {
    now = new Date('2026-03-08T12:00:00Z');
    const first = await api.newWorkspace();
    const ws = first.api;
    expect((await ws.request('PUT', `/v1/model-pricing/${PRICED}`, PRICES)).status).toBe(200);
    expect((await ws.request('PATCH', '/v1/workspace', { time_zone: 'America/New_York' })).status).toBe(200);
    const second = await ws.request('POST', '/v1/api-keys', { name: 'ci-bot', role: 'admin' });
    expect(second.status).toBe(201);
    const bot = caller(api.url, second.body.api_key);
    const keys = (await ws.request('GET', '/v1/api-keys')).body as { id: string; name: string }[];
    const firstKeyId = keys.find((key) => key.id !== second.body.id)!.id;

    const ana = (await ws.request('POST', '/v1/runs', { user_id: 'ana', tags: { project: 'search', team: 'growth' } }))
      .body;
    const bo = (await bot.request('POST', '/v1/runs', { user_id: 'bo' })).body;
    // 8 March 23:59 in New York (EDT since 07:00Z that day, UTC-4) is 03:59Z on the 9th.
    await step(ws, ana.id, '2026-03-09T03:59:00Z', PRICED, 1000);
    // 9 March 00:00 in New York: the next local day, though the same UTC day.
    await step(ws, ana.id, '2026-03-09T04:00:00Z', PRICED, 333);
    await step(bot, bo.id, '2026-03-09T15:00:00Z', PRICED, 77);
    await step(bot, bo.id, '2026-03-09T16:00:00Z', UNPRICED, 500);
    await step(bot, bo.id, '2026-03-09T17:00:00Z', null);
    // 10 March 00:00 local: outside a report that ends on the 9th.
    await step(ws, ana.id, '2026-03-10T04:00:00Z', PRICED, 10);
    return { ws, runs: [ana.id, bo.id], firstKeyId, botKeyId: second.body.id as string };
  }

  /** The steps' own costs in microdollars, from the runs' details, within [start, end) (each finishes when created). */
  async function stepMicros(ws: Caller, runIds: string[], start: string, end: string): Promise<number> {
    let micros = 0;
    for (const id of runIds) {
      const detail = (await ws.request('GET', `/v1/runs/${id}`)).body as {
        steps: { cost_usd: number | null; created_at: string }[];
      };
      for (const s of detail.steps)
        if (
          s.cost_usd !== null &&
          Date.parse(s.created_at) >= Date.parse(start) &&
          Date.parse(s.created_at) < Date.parse(end)
        )
          micros += Math.round(s.cost_usd * 1e6);
    }
    return micros;
  }

  it('when grouped by day in New York, then a call at 23:59 local and one at 00:00 fall on their local days', async () => {
    const { ws } = await newYorkWorkspace();
    const answer = await report(ws, 'from=2026-03-08&to=2026-03-09&group_by=day');
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ from: '2026-03-08', to: '2026-03-09', group_by: 'day' });
    // 1000 + 1007 tokens at 1.3 and 7.1 µ$: 1300 + 7149.7 → 0.008450 (rounded per step as recorded).
    expect(answer.body.rows).toEqual([
      { key: '2026-03-08', spend_usd: 0.00845, tokens: 2007, calls: 1, unpriced_calls: 0 },
      expect.objectContaining({ key: '2026-03-09', calls: 4, unpriced_calls: 1 }),
    ]);
    const only9th = (await report(ws, 'from=2026-03-09&to=2026-03-09&group_by=day')).body;
    expect(only9th.rows.map((row: { key: string }) => row.key)).toEqual(['2026-03-09']);
    expect(only9th.total.calls).toBe(4);
  });

  it('when asked as CSV, then its totals equal the JSON total and the sum of the steps', async () => {
    const { ws, runs, firstKeyId, botKeyId } = await newYorkWorkspace();
    for (const group of ['user', 'key', 'model', 'day', 'tag:project']) {
      const query = `from=2026-03-08&to=2026-03-09&group_by=${group}`;
      const json = (await report(ws, query)).body;
      const csv = await report(ws, query, { accept: 'text/csv' });
      expect(csv.status).toBe(200);
      expect(csv.headers.get('content-type')).toMatch(/^text\/csv/);
      const lines = (csv.body as string).trimEnd().split('\r\n');
      expect(lines[0]).toBe('key,spend_usd,tokens,calls,unpriced_calls');
      const rows = lines.slice(1).map((line) => line.split(','));
      expect(rows).toHaveLength(json.rows.length);
      const csvMicros = rows.reduce((sum, row) => sum + Math.round(Number(row[1]) * 1e6), 0);
      expect(csvMicros).toBe(Math.round(json.total.spend_usd * 1e6));
      expect(rows.reduce((sum, row) => sum + Number(row[2]), 0)).toBe(json.total.tokens);
      expect(rows.reduce((sum, row) => sum + Number(row[3]), 0)).toBe(json.total.calls);
      expect(rows.reduce((sum, row) => sum + Number(row[4]), 0)).toBe(json.total.unpriced_calls);
      // 8 March 00:00 EST is 05:00Z; 10 March 00:00 EDT is 04:00Z.
      expect(csvMicros).toBe(await stepMicros(ws, runs, '2026-03-08T05:00:00Z', '2026-03-10T04:00:00Z'));
      expect(json.total).toMatchObject({ tokens: 2007 + 673 + 161 + 1007, calls: 5, unpriced_calls: 1 });
    }
    const byUser = (await report(ws, 'from=2026-03-08&to=2026-03-09&group_by=user')).body;
    expect(byUser.rows.map((row: { key: string }) => row.key).sort()).toEqual(['ana', 'bo']);
    const byKey = (await report(ws, 'from=2026-03-08&to=2026-03-09&group_by=key')).body;
    expect(byKey.rows.map((row: { key: string }) => row.key).sort()).toEqual([firstKeyId, botKeyId].sort());
    // Ana's run is tagged project=search, Bo's untagged: the row whose key is null.
    const byTag = (await report(ws, 'from=2026-03-08&to=2026-03-09&group_by=tag:project')).body;
    expect(byTag.group_by).toBe('tag:project');
    expect(byTag.rows.map((row: { key: string | null; calls: number }) => [row.key, row.calls])).toEqual([
      ['search', 2],
      [null, 3],
    ]);
    const byTagCsv = await report(ws, 'from=2026-03-08&to=2026-03-09&group_by=tag:project', { accept: 'text/csv' });
    expect((byTagCsv.body as string).split('\r\n')[1]).toMatch(/^search,/);
    expect((byTagCsv.body as string).split('\r\n')[2]).toMatch(/^,/);
    const byModel = (await report(ws, 'from=2026-03-08&to=2026-03-09&group_by=model')).body;
    // The tool call has no model: it is the row with key null, last.
    expect(byModel.rows.at(-1)).toEqual({ key: null, spend_usd: 0, tokens: 0, calls: 1, unpriced_calls: 0 });
    expect(byModel.rows.find((row: { key: string }) => row.key === UNPRICED)).toEqual({
      key: UNPRICED,
      spend_usd: 0,
      tokens: 1007,
      calls: 1,
      unpriced_calls: 1,
    });
  });

  it("when another workspace asks, then it sees none of this one's spend", async () => {
    await newYorkWorkspace();
    const other = (await api.newWorkspace()).api;
    const answer = (await report(other, 'from=2026-03-01&to=2026-03-31&group_by=user')).body;
    expect(answer.rows).toEqual([]);
    expect(answer.total).toEqual({ spend_usd: 0, tokens: 0, calls: 0, unpriced_calls: 0 });
  });

  it('when the input is bad, then the answer is a 422 naming the field; an agent key gets 403', async () => {
    const ws = (await api.newWorkspace()).api;
    const cases: [string, string][] = [
      ['from=2026-03-10&to=2026-03-09&group_by=day', 'query.to'],
      ['from=2026-02-30&to=2026-03-09&group_by=day', 'query.from'],
      ['from=2026-03-01&to=2026-3-9&group_by=day', 'query.to'],
      ['from=yesterday&to=2026-03-09&group_by=day', 'query.from'],
      ['to=2026-03-09&group_by=day', 'query.from'],
      ['from=2026-03-01&to=2026-03-09&group_by=colour', 'query.group_by'],
      ['from=2026-03-01&to=2026-03-09&group_by=tag:Project', 'query.group_by'],
      ['from=2026-03-01&to=2026-03-09&group_by=tag:', 'query.group_by'],
      ['from=2026-03-01&to=2026-03-09', 'query.group_by'],
      ['from=2025-01-01&to=2026-03-09&group_by=day', 'query.to'],
    ];
    for (const [query, path] of cases) {
      const answer = await report(ws, query);
      expect({ query, status: answer.status, code: answer.body.code }).toEqual({
        query,
        status: 422,
        code: 'VALIDATION_FAILED',
      });
      expect(answer.body.errors).toEqual([expect.objectContaining({ path })]);
    }
    const agent = await ws.request('POST', '/v1/api-keys', { name: 'agent', role: 'agent' });
    expect(
      (await report(caller(api.url, agent.body.api_key), 'from=2026-03-01&to=2026-03-09&group_by=day')).status,
    ).toBe(403);
    const colour = (await report(ws, 'from=2026-03-01&to=2026-03-09&group_by=colour')).body;
    expect(colour.errors[0].message).toContain('user, key, model, day');
  });
});
