/**
 * Three daemon processes on one Postgres and one Redis, under parallel load spread over all three.
 * Run admissions (concurrency, monthly limit) are serialized by a per-workspace lock in Postgres,
 * so they hold exactly: never one over. A budget is checked against spend recorded so far, so it
 * can be overshot only by steps admitted before the spend of earlier ones was recorded: with N
 * agents each having at most one step in flight, at most N - 1 steps past the budget. Spend
 * counters equal the records, and the Redis copy equals them once every write was answered, with
 * each daemon's periodic reconcile running all along.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemonProcess, type DaemonProcess } from '../support/daemon-process.js';
import { REDIS_URL } from '../support/services.js';
import { clearOfUtcMidnight, MIDNIGHT_HOOK_TIMEOUT_MS } from '../support/utc-day.js';

describe('three daemons on one Postgres and one Redis under parallel load', () => {
  let daemons: DaemonProcess[];
  let db: pg.Client;
  let workspaceId: string;

  beforeAll(async () => {
    await clearOfUtcMidnight();
    // Each also reconciles every 50 ms, as a fleet's periodic reconciles may overlap any write:
    // a check of the Redis copy must never set it below what the records already hold.
    const env = { RUNGUARD_RECONCILE_INTERVAL_MS: '50' };
    const first = await startDaemonProcess({ env });
    daemons = [
      first,
      ...(await Promise.all([
        startDaemonProcess({ sharing: first, env }),
        startDaemonProcess({ sharing: first, env }),
      ])),
    ];
    db = new pg.Client({ connectionString: first.databaseUrl });
    await db.connect();
    workspaceId = (await first.request('GET', '/v1/workspace')).body.id;
  }, MIDNIGHT_HOOK_TIMEOUT_MS);
  afterAll(async () => {
    await db?.end();
    for (const daemon of [...(daemons ?? [])].reverse()) await daemon.close();
  });

  const via = (i: number) => daemons[i % daemons.length]!;
  const patch = async (body: Record<string, unknown>) =>
    expect((await via(0).request('PATCH', '/v1/workspace', body)).status).toBe(200);
  const startAll = (count: number, tag: string) =>
    Promise.all(
      Array.from({ length: count }, (_, i) => via(i).request('POST', '/v1/runs', { user_id: `${tag}${i % 5}` })),
    );
  const endRunning = async () => {
    const { rows } = await db.query<{ id: string }>(`SELECT id::text FROM runs WHERE status = 'RUNNING'`);
    await Promise.all(rows.map((r, i) => via(i).request('POST', `/v1/runs/${r.id}/end`, { status: 'COMPLETED' })));
  };

  it('when 90 starts race over three daemons against max_concurrent_runs = 7, then exactly 7 are admitted', async () => {
    await patch({ max_concurrent_runs: 7 });
    const results = await startAll(90, 'c');
    expect(results.every((r) => r.status === 201)).toBe(true);
    expect(results.filter((r) => r.body.status === 'RUNNING')).toHaveLength(7);
    expect(results.filter((r) => r.body.decision.reason === 'MAX_CONCURRENT_RUNS_EXCEEDED')).toHaveLength(83);
    const { rows } = await db.query(`SELECT count(*)::int AS n FROM runs WHERE status = 'RUNNING'`);
    expect(rows[0].n).toBe(7);
    await endRunning();
  });

  it('when 90 starts race over three daemons with 10 runs left this month, then exactly 10 are admitted', async () => {
    const { rows } = await db.query(
      `SELECT coalesce(sum(runs), 0)::int AS n FROM usage_daily WHERE workspace_id = $1 AND day >= date_trunc('month', now() AT TIME ZONE 'UTC')`,
      [workspaceId],
    );
    await patch({ max_concurrent_runs: 100, monthly_run_limit: rows[0].n + 10 });
    const results = await startAll(90, 'm');
    expect(results.filter((r) => r.body.status === 'RUNNING')).toHaveLength(10);
    expect(results.filter((r) => r.body.decision.reason === 'MONTHLY_RUN_LIMIT_EXCEEDED')).toHaveLength(80);
    const usage = (await via(1).request('GET', '/v1/usage')).body;
    expect(usage.monthly_runs).toBe(usage.monthly_run_limit);
    const { rows: allowed } = await db.query(`SELECT count(*)::int AS n FROM runs WHERE status <> 'BLOCKED'`);
    expect(usage.monthly_runs).toBe(allowed[0].n);
    await endRunning();
    await patch({ monthly_run_limit: 250_000 }); // the scale plan's ceiling
  });

  it("when 60 runs start, step and end over three daemons at once, then each daemon's run list totals are the runs' counts", async () => {
    const started = (await startAll(60, 't')).map((r) => r.body);
    await Promise.all(
      started
        .filter((r) => r.status === 'RUNNING')
        .map(async (run, i) => {
          expect(
            (
              await via(i + 1).request('POST', `/v1/runs/${run.id}/steps`, {
                type: 'TOOL_CALL',
                sequence: 1,
                tool_name: 't',
              })
            ).status,
          ).toBe(201);
          // Ended by two daemons at once: one end counts.
          const ends = await Promise.all(
            [via(i + 2), via(i)].map((d) =>
              d.request('POST', `/v1/runs/${run.id}/end`, { status: i % 2 ? 'FAILED' : 'COMPLETED' }),
            ),
          );
          expect(ends.filter((e) => e.status === 200)).toHaveLength(1);
        }),
    );
    const { rows } = await db.query<{ status: string; n: number }>(
      'SELECT status, count(*)::int AS n FROM runs WHERE workspace_id = $1 GROUP BY status',
      [workspaceId],
    );
    const counted = new Map(rows.map((r) => [r.status, r.n]));
    expect(counted.get('RUNNING') ?? 0).toBe(0);
    for (const [i, daemon] of daemons.entries()) {
      expect((await daemon.request('GET', '/v1/runs?per_page=1')).body.total).toBe(
        rows.reduce((sum, r) => sum + r.n, 0),
      );
      for (const status of ['RUNNING', 'COMPLETED', 'FAILED', 'BLOCKED']) {
        expect([i, status, (await daemon.request('GET', `/v1/runs?status=${status}&per_page=1`)).body.total]).toEqual([
          i,
          status,
          counted.get(status) ?? 0,
        ]);
      }
    }
  });

  it('when 12 agents spend over three daemons against a daily budget, then it is reached and overshot by at most 11 steps, and spend equals the records', async () => {
    const AGENTS = 12;
    const STEP_MICROS = 10_000; // one prompt token at $0.01
    const BUDGET_MICROS = 500_000;
    await via(0).request('PUT', '/v1/model-pricing/m', { input_cost_per_token: 0.01, output_cost_per_token: 0 });
    await patch({ daily_budget_usd: BUDGET_MICROS / 1e6 });
    const runs = (await startAll(AGENTS, 'b')).map((r) => r.body.id as string);
    let allowed = 0;
    // Each agent has at most one step in flight: it creates a step and reports its cost before the next.
    await Promise.all(
      runs.map(async (runId, agent) => {
        for (let sequence = 1; ; sequence++) {
          const daemon = via(agent + sequence); // every agent uses all three daemons in turn
          const step = await daemon.request('POST', `/v1/runs/${runId}/steps`, {
            type: 'MODEL_CALL',
            sequence,
            model: 'm',
          });
          expect(step.status).toBe(201);
          if (step.body.status === 'BLOCKED') {
            expect(step.body.decision.reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
            return;
          }
          allowed++;
          const done = await via(agent + sequence + 1).request('PATCH', `/v1/runs/${runId}/steps/${step.body.id}`, {
            status: 'COMPLETED',
            prompt_tokens: 1,
          });
          expect(done.status).toBe(200);
        }
      }),
    );
    // Every admitted step read spend < budget; spend it did not see was at most the other agents'
    // steps in flight then.
    expect(allowed).toBeGreaterThanOrEqual(BUDGET_MICROS / STEP_MICROS);
    expect(allowed).toBeLessThanOrEqual(BUDGET_MICROS / STEP_MICROS + AGENTS - 1);
    const day = new Date().toISOString().slice(0, 10);
    const {
      rows: [spend],
    } = await db.query(
      `SELECT (SELECT spend_micros FROM usage_daily WHERE workspace_id = $1 AND day = $2)::bigint AS counter,
         (SELECT sum(spend_micros) FROM user_usage_daily WHERE workspace_id = $1 AND day = $2)::bigint AS users,
         (SELECT coalesce(sum(round(cost_usd * 1000000)), 0) FROM steps WHERE workspace_id = $1)::bigint AS steps`,
      [workspaceId, day],
    );
    expect(Number(spend.steps)).toBe(allowed * STEP_MICROS);
    expect(spend.counter).toBe(spend.steps);
    expect(spend.users).toBe(spend.steps);
    const redis = new Redis(REDIS_URL, { keyPrefix: daemons[0]!.redisKeyPrefix });
    try {
      expect(await redis.get(`{${workspaceId}}:spend:${day}`)).toBe(String(spend.steps));
    } finally {
      redis.disconnect();
    }
    // Every daemon now denies the next step.
    for (const daemon of daemons) {
      const run = (await daemon.request('POST', '/v1/runs', { user_id: 'late' })).body;
      expect(run.decision.reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
    }
  });
});
