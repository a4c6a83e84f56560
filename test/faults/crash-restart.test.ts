/**
 * The daemon is killed with SIGKILL in the middle of parallel load (runs started, steps created
 * and priced, runs ended), then started again. Every answer it gave a success for is in the
 * database, the durable counters equal what the records imply, the Redis copy never counts more
 * than the records, `runguard reconcile --dry-run` finds no drift, and a tampered counter is
 * reported and repaired.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../support/daemon.js';
import { startDaemonProcess, type DaemonProcess } from '../support/daemon-process.js';
import { REDIS_URL } from '../support/services.js';
import { clearOfUtcMidnight, MIDNIGHT_HOOK_TIMEOUT_MS } from '../support/utc-day.js';

interface Answered {
  /** Run ids answered 201, with the status answered. */
  runs: Map<string, string>;
  /** Step ids answered 201 ALLOWED. */
  steps: Set<string>;
  /** Step ids whose result was answered 200. */
  finished: Set<string>;
  /** Run ids whose end was answered 200. */
  ended: Set<string>;
}

describe('a daemon killed under load, then restarted', () => {
  let daemon: DaemonProcess;
  let db: pg.Client;
  const answered: Answered = { runs: new Map(), steps: new Set(), finished: new Set(), ended: new Set() };
  const MAX_CONCURRENT = 4;

  beforeAll(async () => {
    await clearOfUtcMidnight();
    daemon = await startDaemonProcess({ env: { RUNGUARD_DB_POOL_SIZE: '8' } });
    db = new pg.Client({ connectionString: daemon.databaseUrl });
    await db.connect();
    // Fractions of a microdollar: the counters round each cost half up.
    await daemon.request('PUT', '/v1/model-pricing/m', {
      input_cost_per_token: 0.0000015,
      output_cost_per_token: 0.000002,
    });
    await daemon.request('PATCH', '/v1/workspace', { max_concurrent_runs: MAX_CONCURRENT });
  }, MIDNIGHT_HOOK_TIMEOUT_MS);
  afterAll(async () => {
    await db?.end();
    await daemon?.close();
  });

  /** One agent: runs of two priced steps, until the daemon stops answering. */
  async function agent(id: number): Promise<void> {
    for (let n = 0; ; n++) {
      const started = await daemon.request('POST', '/v1/runs', { user_id: `user${id % 3}` });
      if (started.status !== 201) throw new Error(`start answered ${started.status}`);
      answered.runs.set(started.body.id, started.body.status);
      if (started.body.status !== 'RUNNING') continue;
      const runId = started.body.id as string;
      for (let sequence = 1; sequence <= 2; sequence++) {
        const step = await daemon.request('POST', `/v1/runs/${runId}/steps`, {
          type: 'MODEL_CALL',
          sequence,
          model: 'm',
        });
        if (step.status !== 201) throw new Error(`step answered ${step.status}`);
        answered.steps.add(step.body.id);
        const tokens = { prompt_tokens: 101 + id + n, completion_tokens: 33 + sequence };
        const done = await daemon.request('PATCH', `/v1/runs/${runId}/steps/${step.body.id}`, {
          status: 'COMPLETED',
          ...tokens,
        });
        if (done.status !== 200) throw new Error(`finish answered ${done.status}`);
        answered.finished.add(step.body.id);
      }
      const end = await daemon.request('POST', `/v1/runs/${runId}/end`, { status: 'COMPLETED' });
      if (end.status !== 200) throw new Error(`end answered ${end.status}`);
      answered.ended.add(runId);
    }
  }

  it('when killed with SIGKILL under load, then every success answered is recorded and the counters equal the records after restart', async () => {
    const agents = Array.from({ length: 8 }, (_, i) => agent(i).catch((error: Error) => error));
    // At least 1.5 s of load, and past the answers asserted below however slow the machine is:
    // a fixed sleep alone left a loaded machine killing the daemon before enough had been answered.
    const loadedUntil = Date.now() + 1_500;
    const deadline = Date.now() + 20_000;
    while (Date.now() < loadedUntil || answered.finished.size <= 10) {
      if (Date.now() > deadline) throw new Error(`only ${answered.finished.size} results answered in 20 s`);
      await new Promise((r) => setTimeout(r, 10));
    }
    await daemon.kill('SIGKILL');
    const endings = await Promise.all(agents);
    // Every agent stopped because the daemon vanished, not because of an answer.
    for (const ending of endings)
      expect(String((ending as Error).cause ?? ending)).toMatch(
        /ECONNREFUSED|other side closed|ECONNRESET|fetch failed/,
      );
    expect(answered.finished.size).toBeGreaterThan(10);

    const { rows: runs } = await db.query<{ id: string; status: string }>('SELECT id::text, status FROM runs');
    const status = new Map(runs.map((r) => [r.id, r.status]));
    for (const [id, answer] of answered.runs) {
      expect(status.has(id), `run ${id}`).toBe(true);
      if (answer === 'BLOCKED') expect(status.get(id)).toBe('BLOCKED');
    }
    for (const id of answered.ended) expect(status.get(id)).toBe('COMPLETED');
    const { rows: steps } = await db.query<{ id: string; status: string; cost: string | null }>(
      'SELECT id::text, status, cost_usd::text AS cost FROM steps',
    );
    const stepById = new Map(steps.map((s) => [s.id, s]));
    for (const id of answered.steps) expect(stepById.has(id), `step ${id}`).toBe(true);
    for (const id of answered.finished) {
      expect(stepById.get(id)).toMatchObject({ status: 'COMPLETED' });
      expect(stepById.get(id)!.cost).not.toBeNull();
    }
    expect(runs.filter((r) => r.status === 'RUNNING').length).toBeLessThanOrEqual(MAX_CONCURRENT);

    await daemon.start();
    await expectCountersEqualRecords();
    const clean = await runCli(['reconcile', '--dry-run', '--days', '2'], { DATABASE_URL: daemon.databaseUrl });
    expect(clean.stdout).toMatch(/No drift since/);
    expect(clean.code).toBe(0);
  });

  async function expectCountersEqualRecords() {
    // Spend and runs, over every day and user: the durable counters against the records.
    const {
      rows: [totals],
    } = await db.query(`
      SELECT (SELECT coalesce(sum(spend_micros), 0) FROM usage_daily)::bigint AS ws_spend,
        (SELECT coalesce(sum(spend_micros), 0) FROM user_usage_daily)::bigint AS user_spend,
        (SELECT coalesce(sum(round(cost_usd * 1000000)), 0) FROM steps WHERE cost_usd IS NOT NULL)::bigint AS step_spend,
        (SELECT coalesce(sum(runs), 0) FROM usage_daily)::bigint AS ws_runs,
        (SELECT coalesce(sum(runs), 0) FROM user_usage_daily)::bigint AS user_runs,
        (SELECT count(*) FROM runs WHERE status <> 'BLOCKED')::bigint AS allowed_runs,
        (SELECT count(*) FROM runs WHERE status = 'RUNNING')::bigint AS running`);
    expect(Number(totals.step_spend)).toBeGreaterThan(0);
    expect(totals.ws_spend).toBe(totals.step_spend);
    expect(totals.user_spend).toBe(totals.step_spend);
    expect(totals.ws_runs).toBe(totals.allowed_runs);
    expect(totals.user_runs).toBe(totals.allowed_runs);
    // What the daemon decides with: monthly runs and RUNNING runs, as /v1/usage reports them.
    const usage = (await daemon.request('GET', '/v1/usage?days=2')).body;
    expect(usage.concurrent_runs).toBe(Number(totals.running));
    expect(usage.monthly_runs).toBe(Number(totals.allowed_runs));
    expect(Math.round(usage.workspace_daily_spend_usd * 1e6)).toBe(Number(totals.ws_spend));
    // The Redis copy may lag (a write lost with the process) but never counts more than the records.
    const workspaceId = (await daemon.request('GET', '/v1/workspace')).body.id;
    const redis = new Redis(REDIS_URL, { keyPrefix: daemon.redisKeyPrefix });
    try {
      const day = new Date().toISOString().slice(0, 10);
      const copy = Number((await redis.get(`{${workspaceId}}:spend:${day}`)) ?? 0);
      expect(copy).toBeLessThanOrEqual(Number(totals.ws_spend));
    } finally {
      redis.disconnect();
    }
  }

  it('when a counter is tampered with, then reconcile --dry-run reports it, reconcile repairs it, and decisions see the repair', async () => {
    const env = { DATABASE_URL: daemon.databaseUrl };
    await db.query('UPDATE usage_daily SET spend_micros = spend_micros + 7, runs = runs + 2');
    const dry = await runCli(['reconcile', '--dry-run', '--days', '2', '--json'], env);
    expect(dry.code).toBe(4);
    const report = JSON.parse(dry.stdout) as {
      drifts: { kind: string; expected: string; found: string }[];
      repaired: boolean;
    };
    expect(report.repaired).toBe(false);
    expect(report.drifts.map((d) => d.kind)).toEqual(['workspace_usage']);
    const [expected, found] = [report.drifts[0]!.expected, report.drifts[0]!.found].map((t) =>
      t
        .match(/spend=(\d+) runs=(\d+)/)!
        .slice(1)
        .map(Number),
    );
    expect(found).toEqual([expected![0]! + 7, expected![1]! + 2]);

    const fixed = await runCli(['reconcile', '--days', '2'], env);
    expect(fixed.code).toBe(0);
    expect(fixed.stdout).toMatch(/1 difference since .*; repaired\./);
    expect((await runCli(['reconcile', '--dry-run', '--days', '2'], env)).code).toBe(0);
    await expectCountersEqualRecords();
  });
});
