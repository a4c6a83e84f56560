/**
 * Postgres stops under proxy load (issue #38, item 7): calls already upstream when it stops are
 * answered and their results written once it is back; calls that arrive while it is down are
 * answered 503 in the provider's format and never forwarded; calls after it returns go through.
 * Nothing is forwarded without its record, and no forwarded call's record is lost.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DaemonProcess } from '../support/daemon-process.js';
import { startDaemonOnPrivatePostgres, type DaemonOnPrivatePostgres } from '../support/daemon-on-private-postgres.js';
import type { FakeUpstream } from '../support/fake-upstream.js';
import type { PrivatePostgres } from '../support/private-services.js';

describe('Postgres down under proxy load', () => {
  let outage: DaemonOnPrivatePostgres;
  let cluster: PrivatePostgres;
  let upstream: FakeUpstream;
  let daemon: DaemonProcess;

  beforeAll(async () => {
    outage = await startDaemonOnPrivatePostgres();
    ({ cluster, upstream, daemon } = outage);
  });
  afterAll(async () => {
    await outage?.close();
  });

  const query = (sql: string, params?: unknown[]) => cluster.query(sql, params);

  /** A run-less chat completion (a run of its own); its status and step id, or 'closed'. */
  const call = async (user: string, delayMs = 0): Promise<{ status: number | 'closed'; stepId: string | null }> => {
    try {
      const res = await fetch(`${daemon.url}/proxy/openai/v1/chat/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-runguard-user-id': user,
          'x-runguard-key': daemon.apiKey,
          authorization: 'Bearer sk-upstream',
          'x-fake-delay-ms': String(delayMs),
        },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: `hello from ${user}` }] }),
      });
      const body = await res.text();
      if (res.status === 503) expect(JSON.parse(body).error).toMatchObject({ code: 'SERVICE_UNAVAILABLE' });
      return { status: res.status, stepId: res.headers.get('x-runguard-step-id') };
    } catch {
      return { status: 'closed', stepId: null };
    }
  };

  it('when Postgres stops with calls upstream and more arriving, then nothing is forwarded unrecorded and nothing forwarded is lost', async () => {
    const pid = daemon.pid;
    expect(
      (
        await daemon.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
          input_cost_per_token: 0.000001,
          output_cost_per_token: 0.000002,
        })
      ).status,
    ).toBe(200);

    // 10 calls upstream (slow answers) when Postgres stops. A call is forwarded while its record
    // commits (issue #35): these are upstream and recorded, so their answers are due.
    const inFlight = Array.from({ length: 10 }, (_, i) => call(`before${i}`, 1_500));
    const recordedBefore = async () =>
      (
        await query(
          `SELECT count(*)::int AS n FROM steps s JOIN runs r ON r.id = s.run_id WHERE r.user_id LIKE 'before%'`,
        )
      )[0].n;
    while (upstream.requests.length < 10 || (await recordedBefore()) < 10) await new Promise((r) => setTimeout(r, 10));
    await cluster.stop('immediate');

    // 30 parallel calls while it is down.
    const duringDown = await Promise.all(Array.from({ length: 30 }, (_, i) => call(`during${i}`)));
    const before = await Promise.all(inFlight);
    expect(daemon.running).toBe(true);
    await cluster.start();

    // 10 parallel calls once it is back.
    const after = await Promise.all(Array.from({ length: 10 }, (_, i) => call(`after${i}`)));

    expect(before.map((r) => r.status)).toEqual(Array(10).fill(200));
    expect(duringDown.map((r) => r.status)).toEqual(Array(30).fill(503));
    expect(after.map((r) => r.status)).toEqual(Array(10).fill(200));
    // Forwarded: exactly the calls answered 200; none of those refused while the database was down.
    expect(upstream.requests).toHaveLength(20);
    expect(upstream.requests.filter((r) => JSON.stringify(r.body).includes('during'))).toEqual([]);

    // Every forwarded call's result and its run's end reach the records (retried until Postgres is back).
    const answered = [...before, ...after].map((r) => r.stepId!);
    let rows: { step: string; run: string; prompt: number | null }[] = [];
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      rows = await query(
        `SELECT s.status AS step, r.status AS run, s.prompt_tokens::int AS prompt
           FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.id = ANY($1::uuid[])`,
        [answered],
      );
      if (rows.length === 20 && rows.every((row) => row.run !== 'RUNNING')) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(rows).toHaveLength(20);
    for (const row of rows) expect(row).toEqual({ step: 'COMPLETED', run: 'COMPLETED', prompt: expect.any(Number) });
    // Nothing of the refused calls was recorded: their users have no runs.
    const refused = await query(`SELECT count(*)::int AS n FROM runs WHERE user_id LIKE 'during%'`);
    expect(refused).toEqual([{ n: 0 }]);
    // Spend of every forwarded call counted.
    const spenders = await query(`SELECT count(*)::int AS n FROM user_usage_daily WHERE spend_micros > 0`);
    expect(spenders).toEqual([{ n: 20 }]);
    expect(daemon.pid).toBe(pid);
  });
});
