/**
 * Postgres stops for real under a running daemon: a private cluster is shut down (immediate mode,
 * a crash) and started again. The daemon answers 503 with a clear detail while it is down, allows
 * nothing it could not record, forwards nothing upstream, keeps running, and recovers by itself:
 * the same process answers the next requests once Postgres is back (the pg pool replaces its dead
 * connections).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DaemonProcess } from '../support/daemon-process.js';
import { startDaemonOnPrivatePostgres, type DaemonOnPrivatePostgres } from '../support/daemon-on-private-postgres.js';
import type { FakeUpstream } from '../support/fake-upstream.js';
import type { PrivatePostgres } from '../support/private-services.js';

const DOWN = { detail: 'The database is unavailable; try again shortly.', code: 'SERVICE_UNAVAILABLE' };

describe('Postgres down under a running daemon', () => {
  let outage: DaemonOnPrivatePostgres;
  let cluster: PrivatePostgres;
  let upstream: FakeUpstream;
  let daemon: DaemonProcess;
  let pid: number | null;

  beforeAll(async () => {
    outage = await startDaemonOnPrivatePostgres();
    ({ cluster, upstream, daemon } = outage);
    pid = daemon.pid;
  });
  afterAll(async () => {
    await outage?.close();
  });

  const query = (sql: string, params?: unknown[]) => cluster.query(sql, params);
  const proxyCall = () =>
    fetch(`${daemon.url}/proxy/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-runguard-user-id': 'ada', authorization: 'Bearer sk-upstream' },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });

  it('when Postgres is down, then every decision answers 503 with a clear detail, nothing is allowed or forwarded, and the daemon recovers by itself', async () => {
    const run = (await daemon.request('POST', '/v1/runs', { user_id: 'ada' })).body;
    expect(run.status).toBe('RUNNING');
    const step = (
      await daemon.request('POST', `/v1/runs/${run.id}/steps`, { type: 'TOOL_CALL', sequence: 1, tool_name: 't' })
    ).body;
    expect((await proxyCall()).status).toBe(200);
    expect(upstream.requests).toHaveLength(1);
    upstream.requests.length = 0;
    const before = await query(
      'SELECT (SELECT count(*) FROM runs)::int AS runs, (SELECT count(*) FROM steps)::int AS steps',
    );

    await cluster.stop('immediate');
    const answers = [
      await daemon.request('POST', '/v1/runs', { user_id: 'ada' }),
      await daemon.request('POST', `/v1/runs/${run.id}/steps`, { type: 'TOOL_CALL', sequence: 2, tool_name: 't' }),
      await daemon.request('PATCH', `/v1/runs/${run.id}/steps/${step.id}`, { status: 'COMPLETED' }),
      await daemon.request('POST', `/v1/runs/${run.id}/end`, { status: 'COMPLETED' }),
      await daemon.request('GET', `/v1/runs/${run.id}`),
    ];
    for (const answer of answers) {
      expect(answer.status).toBe(503);
      expect(answer.body).toEqual(DOWN);
    }
    const proxied = await proxyCall();
    expect(proxied.status).toBe(503);
    expect(((await proxied.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'SERVICE_UNAVAILABLE',
      message: DOWN.detail,
    });
    expect(upstream.requests).toHaveLength(0);
    const health = await fetch(`${daemon.url}/health`);
    expect(health.status).toBe(503);
    expect(await health.json()).toMatchObject({
      checks: { database: 'unavailable' },
      detail: 'Unavailable: database.',
    });
    expect(daemon.running).toBe(true);

    await cluster.start();
    // The same process: no restart, and the next requests succeed, in parallel, on fresh connections.
    expect((await fetch(`${daemon.url}/health`)).status).toBe(200);
    const starts = await Promise.all(
      Array.from({ length: 12 }, (_, i) => daemon.request('POST', '/v1/runs', { user_id: `u${i}` })),
    );
    expect(starts.map((r) => r.status)).toEqual(Array(12).fill(201));
    expect(
      (await daemon.request('POST', `/v1/runs/${run.id}/steps`, { type: 'TOOL_CALL', sequence: 2, tool_name: 't' }))
        .body.status,
    ).toBe('ALLOWED');
    expect((await proxyCall()).status).toBe(200);
    expect(upstream.requests).toHaveLength(1);
    expect(daemon.pid).toBe(pid);
    // Nothing of the outage was recorded: 12 runs and 1 step since, plus the proxy call's run and step.
    const after = await query(
      'SELECT (SELECT count(*) FROM runs)::int AS runs, (SELECT count(*) FROM steps)::int AS steps',
    );
    expect(after).toEqual([{ runs: before[0].runs + 13, steps: before[0].steps + 2 }]);
  });

  it("when Postgres goes away while a proxied call is upstream, then its result and its run's end are written once it is back", async () => {
    const price = await daemon.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
      input_cost_per_token: 0.000001,
      output_cost_per_token: 0.000002,
    });
    expect(price.status).toBe(200);
    upstream.requests.length = 0;
    const answer = fetch(`${daemon.url}/proxy/openai/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-runguard-user-id': 'grace',
        authorization: 'Bearer sk-upstream',
        'x-fake-delay-ms': '1500',
      },
      body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
    });
    while (upstream.requests.length === 0) await new Promise((r) => setTimeout(r, 10));
    await cluster.stop('immediate');
    const res = await answer;
    expect(res.status).toBe(200); // the client has its answer; the record waits for the database
    await res.text();
    const stepId = res.headers.get('x-runguard-step-id')!;
    await new Promise((r) => setTimeout(r, 1_000));
    await cluster.start();

    const deadline = Date.now() + 15_000;
    let rows: { step: string; run: string; prompt: number | null }[] = [];
    while (Date.now() < deadline) {
      rows = await query(
        `SELECT s.status AS step, r.status AS run, s.prompt_tokens::int AS prompt FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.id = $1`,
        [stepId],
      );
      if (rows[0]?.run !== 'RUNNING') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(rows).toEqual([{ step: 'COMPLETED', run: 'COMPLETED', prompt: expect.any(Number) }]);
    expect(rows[0]!.prompt).toBeGreaterThan(0);
    // Its cost reached the user's spend of the day (the run ending COMPLETED above freed its slot).
    const spend = await query(`SELECT spend_micros::int AS spend FROM user_usage_daily WHERE user_id = 'grace'`);
    expect(spend).toEqual([{ spend: expect.any(Number) }]);
    expect(spend[0]!.spend).toBeGreaterThan(0);
    expect(daemon.pid).toBe(pid);
  });

  it('when Postgres stops under parallel load, then the daemon survives, every answered success has its record, and the rest are 503', async () => {
    const load = Array.from({ length: 40 }, async (_, i) => {
      await new Promise((r) => setTimeout(r, i * 5));
      return daemon.request('POST', '/v1/runs', { user_id: `load${i}` });
    });
    expect((await load[0]!).status).toBe(201);
    await cluster.stop('immediate');
    const results = await Promise.all(load);
    expect(daemon.running).toBe(true);
    await cluster.start();
    expect(results.every((r) => r.status === 201 || r.status === 503)).toBe(true);
    expect(results.some((r) => r.status === 503)).toBe(true);
    for (const r of results.filter((x) => x.status === 503)) expect(r.body).toEqual(DOWN);
    const answered = results.filter((r) => r.status === 201).map((r) => r.body.id as string);
    const stored = await query('SELECT id::text FROM runs WHERE id = ANY($1::uuid[])', [answered]);
    expect(stored.map((r) => r.id).sort()).toEqual([...answered].sort());
    expect((await daemon.request('POST', '/v1/runs', { user_id: 'after' })).status).toBe(201);
  });
});
