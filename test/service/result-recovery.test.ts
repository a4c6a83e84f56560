/**
 * Crash recovery against real stores, on every backend: a dead daemon's unfinished proxied steps
 * are ended RESULT_LOST at their estimate exactly once, however many daemons recover at the same
 * moment; what a live daemon owns, and what the API's clients own, is never touched.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import type { Clock } from '../../src/clock.js';
import { GuardService } from '../../src/guard/guard-service.js';
import { createResultRecovery } from '../../src/jobs/result-recovery.js';
import { scopeAt } from '../../src/store/counters/counters.js';
import { registerInstance } from '../../src/store/daemon-instances.js';
import { createWorkspace } from '../../src/store/workspaces.js';
import { openTestStores, type Backend, type TestStores } from '../support/harness.js';
import { runWithStep } from '../support/run-with-step.js';

const log = createLogger('silent');
const clock: Clock = { now: () => new Date() };
const call = { type: 'MODEL_CALL' as const, model: 'unpriced-model', forwarded: true };

describe.each<Backend>(['postgres+redis', 'postgres+sql', 'embedded'])('crash recovery on %s', (backend) => {
  let stores: TestStores;
  beforeAll(async () => {
    stores = await openTestStores(backend);
  });
  afterAll(async () => {
    await stores?.close();
  });

  it("when two daemons recover a dead one's calls at once, then each is ended and charged once, and nothing else is touched", async () => {
    const { db, counters } = stores;
    const ws = await createWorkspace(db, 'recovery', 'enterprise');
    const [deadId, liveId, otherId] = [
      await registerInstance(db, 'test'),
      await registerInstance(db, 'test'),
      await registerInstance(db, 'test'),
    ];
    await db.query(`UPDATE daemon_instances SET heartbeat_at = now() - interval '1 hour' WHERE id = $1`, [deadId]);
    const dead = new GuardService(db, counters, clock, log, null, { id: deadId });
    const live = new GuardService(db, counters, clock, log, null, { id: liveId });

    // The dead daemon's calls: in flight, or answered with only the run's end lost.
    const lostRuns: string[] = [];
    for (let i = 0; i < 90; i++) lostRuns.push((await runWithStep(dead, ws.id, { user_id: `u${i % 3}` }, call)).run.id);
    const answered = await runWithStep(dead, ws.id, { user_id: 'u0' }, call);
    await dead.finishStep(ws.id, answered.run.id, answered.step!.id, {
      status: 'COMPLETED',
      durationMs: 5,
      promptTokens: 10,
      completionTokens: 2,
    });
    // A run its client started: the proxied steps in it are the daemon's, the run is the client's.
    const clientRun = (await dead.startRun(ws.id, { user_id: 'u1' })).id;
    for (let i = 0; i < 20; i++) await dead.createStep(ws.id, clientRun, { ...call, sequence: null });
    // An API step: its client records its result.
    const apiStep = await dead.createStep(ws.id, clientRun, { type: 'TOOL_CALL', sequence: 100, tool_name: 'search' });
    // The live daemon's calls in flight.
    const liveRuns = [];
    for (let i = 0; i < 5; i++) liveRuns.push((await runWithStep(live, ws.id, { user_id: 'u2' }, call)).run.id);
    await db.query(
      `UPDATE steps SET estimate_micros = 1000 + (abs(hashtext(id::text)) % 5000) WHERE status = 'ALLOWED' AND daemon_id IS NOT NULL`,
    );
    const { rows: estimates } = await db.query<{ id: string; estimate: string }>(
      `SELECT id::text, estimate_micros::text AS estimate FROM steps WHERE daemon_id = $1 AND status = 'ALLOWED'`,
      [deadId],
    );
    expect(estimates).toHaveLength(110);

    const recovery = (self: number) =>
      createResultRecovery({
        db,
        counters,
        clock,
        logger: log,
        self: () => self,
        leaseMs: 30_000,
        intervalMs: 0,
        othersDead: false,
        batchSize: 25,
      });
    const passes = await Promise.all([recovery(liveId).recover(), recovery(otherId).recover()]);
    expect(passes[0].steps.length + passes[1].steps.length).toBe(110);
    expect(passes.flatMap((pass) => pass.instances)).not.toContain(liveId);

    const { rows: steps } = await db.query<{
      id: string;
      status: string;
      cost: string | null;
      estimate: string | null;
      error: string | null;
      daemon_id: number | null;
    }>(
      `SELECT id::text, status, round(cost_usd * 1000000)::text AS cost, estimate_micros::text AS estimate,
         output_json ->> 'error' AS error, daemon_id FROM steps`,
    );
    const lost = steps.filter((step) => step.error === 'RESULT_LOST');
    expect(lost.map((step) => step.id).sort()).toEqual(estimates.map((step) => step.id).sort());
    for (const step of lost) expect([step.status, step.cost]).toEqual(['FAILED', step.estimate]);
    expect(steps.filter((step) => step.daemon_id === liveId).map((step) => step.status)).toEqual(
      Array(5).fill('ALLOWED'),
    );
    expect(steps.find((step) => step.id === apiStep.id)).toMatchObject({ status: 'ALLOWED', daemon_id: null });

    const { rows: runs } = await db.query<{ id: string; status: string }>('SELECT id::text, status FROM runs');
    const status = new Map(runs.map((run) => [run.id, run.status]));
    for (const id of lostRuns) expect(status.get(id)).toBe('FAILED');
    expect(status.get(answered.run.id)).toBe('COMPLETED');
    expect(status.get(clientRun)).toBe('RUNNING');
    for (const id of liveRuns) expect(status.get(id)).toBe('RUNNING');

    // Charged once: the day's spend is the estimates' sum, in the records and in what decisions read.
    const charged = estimates.reduce((sum, step) => sum + Number(step.estimate), 0);
    const { rows: usage } = await db.query<{ spend: string }>(
      'SELECT spend_micros::text AS spend FROM usage_daily WHERE workspace_id = $1',
      [ws.id],
    );
    expect(Number(usage[0]!.spend)).toBe(charged);
    const now = clock.now();
    let users = 0;
    for (const user of ['u0', 'u1', 'u2']) {
      const spend = await counters.readSpend(scopeAt(now, ws.id, user));
      expect(spend.workspaceDailySpendMicros).toBe(charged);
      users += spend.userDailySpendMicros;
    }
    expect(users).toBe(charged);
    const { rows: events } = await db.query<{ step_id: string }>(
      `SELECT data ->> 'step_id' AS step_id FROM webhook_events WHERE type = 'result.lost'`,
    );
    expect(events.map((event) => event.step_id).sort()).toEqual(lost.map((step) => step.id).sort());

    // Later passes find nothing more (the dead daemon is looked at again, and has nothing left).
    expect((await recovery(liveId).recover()).steps).toEqual([]);
    const { rows: again } = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM webhook_events WHERE type = 'result.lost'`,
    );
    expect(again[0]!.n).toBe(110);
  });

  it('when this daemon has not reached the database for a whole lease, then a lapsed heartbeat says nothing yet', async () => {
    const { db, counters } = stores;
    const ws = await createWorkspace(db, 'after-outage', 'enterprise');
    const [lapsedId, selfId] = [await registerInstance(db, 'test'), await registerInstance(db, 'test')];
    // Every heartbeat lapses in an outage of the database, the live daemons' too.
    await db.query(`UPDATE daemon_instances SET heartbeat_at = now() - interval '1 minute' WHERE id = $1`, [lapsedId]);
    const owner = new GuardService(db, counters, clock, log, null, { id: lapsedId });
    const { step } = await runWithStep(owner, ws.id, { user_id: 'u' }, call);
    const recovery = (trusted: boolean) =>
      createResultRecovery({
        db,
        counters,
        clock,
        logger: log,
        self: () => selfId,
        leaseMs: 30_000,
        leaseTrusted: () => trusted,
        intervalMs: 0,
        othersDead: false,
      });
    const status = async () =>
      (await db.query<{ status: string }>('SELECT status FROM steps WHERE id = $1', [step!.id])).rows[0]!.status;

    expect((await recovery(false).recover()).instances).not.toContain(lapsedId);
    expect(await status()).toBe('ALLOWED');
    expect((await recovery(true).recover()).instances).toContain(lapsedId);
    expect(await status()).toBe('FAILED');
  });
});
