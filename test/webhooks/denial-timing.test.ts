/**
 * When `guard.denied` is sent, on a test clock: the first denial of a subject and reason in a
 * window at once, the rest of the window in one event once it has ended; a storm of 10,000
 * denials is still a handful of events.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanDenials } from '../../src/webhooks/scans.js';
import { startTestApi, type TestApi } from '../support/harness.js';

const WINDOW_MS = 300_000;
/** The default settle time: a window is counted 10 s after it ends. */
const DENIALS = { windowMs: WINDOW_MS, settleMs: 10_000 };
/** A window's start, on the test clock. */
const WINDOW = Date.UTC(2026, 10, 28, 12, 0, 0);

let api: TestApi;
let now = WINDOW + 60_000;
const at = (ms: number) => new Date(ms);

beforeAll(async () => {
  api = await startTestApi('postgres+sql', { clock: { now: () => at(now) } });
  expect((await api.request('POST', '/v1/webhooks', { url: 'https://hooks.example.com/rg' })).status).toBe(201);
  expect((await api.request('PUT', '/v1/users/mallory', { blocked: true })).status).toBe(200);
});
afterAll(() => api?.close());

async function deniedEvents(): Promise<{ count: number; first: boolean; first_at: string; window_start: string }[]> {
  const { rows } = await api.stores.db.query<{ data: never }>(
    `SELECT data FROM webhook_events WHERE type = 'guard.denied' ORDER BY seq`,
  );
  return rows.map((r) => r.data);
}

describe('guard.denied timing', () => {
  it('when a subject is first denied, then the event is sent at once; the rest of the window, 10,000 denials, in one event at its end', async () => {
    const blocked = await api.request('POST', '/v1/runs', { user_id: 'mallory' });
    expect(blocked.body.decision.reason).toBe('USER_BLOCKED');
    // A scan a second later, minutes before the window ends: the first denial is already news.
    now += 1_000;
    await scanDenials(api.stores.db, at(now), DENIALS);
    expect(await deniedEvents()).toEqual([
      expect.objectContaining({ first: true, count: 1, first_at: at(WINDOW + 60_000).toISOString() }),
    ]);

    // A storm in the same window: 10,000 more denials of mallory (copies of the first, later).
    await api.stores.db.query(
      `INSERT INTO runs SELECT (jsonb_populate_record(r, jsonb_build_object(
         'id', gen_random_uuid(), 'started_at', $2::timestamptz + g * interval '1 millisecond'))).*
       FROM runs r, generate_series(1, 10000) g WHERE r.id = $1`,
      [blocked.body.id, at(WINDOW + 120_000)],
    );
    for (const step of [10_000, 100_000]) {
      now += step;
      await scanDenials(api.stores.db, at(now), DENIALS);
    }
    expect(await deniedEvents()).toHaveLength(1);

    // The window ended (and settled): its count, in one more event.
    now = WINDOW + WINDOW_MS + 11_000;
    await scanDenials(api.stores.db, at(now), DENIALS);
    await scanDenials(api.stores.db, at(now + 5_000), DENIALS);
    const events = await deniedEvents();
    expect(events).toEqual([
      expect.objectContaining({ first: true, count: 1 }),
      expect.objectContaining({ first: false, count: 10_001, window_start: at(WINDOW).toISOString() }),
    ]);
  });

  it('when a window held only the first denial, then no second event repeats it', async () => {
    const before = (await deniedEvents()).length;
    now = WINDOW + 2 * WINDOW_MS + 1_000;
    expect((await api.request('POST', '/v1/runs', { user_id: 'mallory' })).body.decision.reason).toBe('USER_BLOCKED');
    await scanDenials(api.stores.db, at(now + 1_000), DENIALS);
    await scanDenials(api.stores.db, at(WINDOW + 3 * WINDOW_MS + 11_000), DENIALS);
    expect((await deniedEvents()).slice(before)).toEqual([expect.objectContaining({ first: true, count: 1 })]);
  });

  it('when the settle time is set shorter, then an ended window is counted that much sooner', async () => {
    const before = (await deniedEvents()).length;
    const start = WINDOW + 5 * WINDOW_MS;
    now = start + 1_000;
    for (let i = 0; i < 2; i++) {
      expect((await api.request('POST', '/v1/runs', { user_id: 'mallory' })).body.decision.reason).toBe('USER_BLOCKED');
    }
    await scanDenials(api.stores.db, at(now + 1_000), DENIALS);
    // A second after the window ended: not yet counted with the default 10 s, counted with 500 ms.
    const ended = start + WINDOW_MS + 1_000;
    await scanDenials(api.stores.db, at(ended), DENIALS);
    expect((await deniedEvents()).slice(before)).toEqual([expect.objectContaining({ first: true, count: 1 })]);
    await scanDenials(api.stores.db, at(ended), { windowMs: WINDOW_MS, settleMs: 500 });
    expect((await deniedEvents()).slice(before)).toEqual([
      expect.objectContaining({ first: true, count: 1 }),
      expect.objectContaining({ first: false, count: 2, window_start: at(start).toISOString() }),
    ]);
  });
});
