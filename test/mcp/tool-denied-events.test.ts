/**
 * Issue #50: denied tool calls reach the alerts as `tool.denied`, aggregated as `guard.denied` is
 * (the window's first at once, the rest counted at its end), per tool.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanDenials } from '../../src/webhooks/scans.js';
import { startTestApi, type TestApi } from '../support/harness.js';

const WINDOW_MS = 300_000;
/** The default settle time: a window is counted 10 s after it ends. */
const DENIALS = { windowMs: WINDOW_MS, settleMs: 10_000 };
const WINDOW = Date.UTC(2026, 10, 28, 12, 0, 0);

let api: TestApi;
let now = WINDOW + 60_000;
const at = (ms: number) => new Date(ms);

beforeAll(async () => {
  api = await startTestApi('postgres+sql', { clock: { now: () => at(now) } });
  expect((await api.request('POST', '/v1/webhooks', { url: 'https://hooks.example.com/rg' })).status).toBe(201);
  expect(
    (await api.request('PATCH', '/v1/workspace', { tool_policy: { deny: ['*.delete_*'], allow: null } })).status,
  ).toBe(200);
});
afterAll(() => api?.close());

const events = async (type: string) =>
  (
    await api.stores.db.query<{ data: Record<string, unknown> }>(
      'SELECT data FROM webhook_events WHERE type = $1 ORDER BY seq',
      [type],
    )
  ).rows.map((row) => row.data);

describe('tool.denied', () => {
  it('when tool calls are denied, then tool.denied names the tool: the first at once, the rest counted when the window ends', async () => {
    const run = (await api.request('POST', '/v1/runs', { user_id: 'tina' })).body;
    for (let sequence = 1; sequence <= 3; sequence++) {
      const step = await api.request('POST', `/v1/runs/${run.id}/steps`, {
        type: 'TOOL_CALL',
        sequence,
        tool_name: 'fs.delete_file',
        input_data: { path: `/tmp/${sequence}` },
      });
      expect(step.body.decision.reason).toBe('TOOL_NOT_ALLOWED');
    }
    now += 1_000;
    await scanDenials(api.stores.db, at(now), DENIALS);
    expect(await events('tool.denied')).toEqual([
      expect.objectContaining({ tool: 'fs.delete_file', reason: 'TOOL_NOT_ALLOWED', first: true, count: 1 }),
    ]);
    // guard.denied still counts them, with no tool.
    expect((await events('guard.denied'))[0]).not.toHaveProperty('tool');
    now = WINDOW + WINDOW_MS + 11_000;
    await scanDenials(api.stores.db, at(now), DENIALS);
    expect((await events('tool.denied')).at(-1)).toMatchObject({ tool: 'fs.delete_file', first: false, count: 3 });
  });
});
