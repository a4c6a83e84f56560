/**
 * A daemon dies with proxied calls in flight (issue #34, part 4): real daemon processes, killed
 * with SIGKILL while a slow fake upstream holds their calls. Whoever notices first (the daemon
 * restarted, or another daemon on the same database) ends the dead one's unfinished steps FAILED
 * RESULT_LOST, charged at their estimate (in the step, the run, and the day's spend counters),
 * ends the runs it started for calls of their own, and tells webhooks `result.lost`. Calls it
 * answered keep their result; a live daemon's calls in flight are never touched.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startDaemonProcess, type DaemonProcess } from '../support/daemon-process.js';
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { clearOfUtcMidnight, MIDNIGHT_HOOK_TIMEOUT_MS } from '../support/utc-day.js';
import { startReceiver, type Receiver } from '../support/webhook-receiver.js';
import { runCli } from '../support/daemon.js';
import { REDIS_URL } from '../support/services.js';

const MODEL = 'gpt-4o-mini';
/** Short intervals, so that a test sees recovery in seconds (the defaults meet 60 s). */
const FAST_RECOVERY = {
  RUNGUARD_DAEMON_HEARTBEAT_INTERVAL_MS: '200',
  RUNGUARD_DAEMON_LEASE_MS: '1500',
  RUNGUARD_RESULT_RECOVERY_INTERVAL_MS: '250',
  RUNGUARD_WEBHOOK_ALLOW_PRIVATE: 'true',
  RUNGUARD_WEBHOOK_POLL_INTERVAL_MS: '100',
};
/** How long a test waits for recovery: the lease and two passes, and a loaded machine's slack. */
const RECOVERY_WITHIN_MS = 30_000;
/** A start on a loaded machine: PGlite's first (its files, the migrations) takes 20 s and more. */
const START_MS = 60_000;
/** A call the upstream holds far longer than any test. */
const HELD_MS = 120_000;

interface StepRow {
  id: string;
  run_id: string;
  status: string;
  cost_micros: string | null;
  estimate_micros: string | null;
  output: { error?: string; charged?: string } | null;
  daemon_id: number | null;
}

/**
 * A proxied chat call; `runId` null: a run of the call's own; `hold`: the upstream answers once the
 * test releases that name. Answers the response, or the error that ended it.
 */
function call(
  daemon: DaemonProcess,
  options: { delayMs: number; hold?: string; user?: string; runId?: string | null },
) {
  const path = options.runId ? `/proxy/runs/${options.runId}/openai` : '/proxy/openai';
  return fetch(`${daemon.url}${path}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: 'Bearer sk-test',
      'x-runguard-key': daemon.apiKey,
      'x-runguard-user-id': options.user ?? 'agent',
      'x-fake-delay-ms': String(options.delayMs),
      ...(options.hold ? { 'x-fake-hold': options.hold } : {}),
    },
    body: JSON.stringify({ model: MODEL, max_tokens: 50, messages: [{ role: 'user', content: 'Take your time.' }] }),
  }).then(
    async (response) => ({ status: response.status, body: await response.text() }),
    (error: unknown) => ({ status: 0, body: String(error) }),
  );
}

async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>, withinMs: number) {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const got = await probe();
    if (got) return got;
    if (Date.now() > deadline) throw new Error(`not within ${withinMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function steps(db: pg.Client): Promise<StepRow[]> {
  const { rows } = await db.query<StepRow>(
    `SELECT id::text, run_id::text, status, round(cost_usd * 1000000)::text AS cost_micros,
       estimate_micros::text, output_json::jsonb AS output, daemon_id FROM steps ORDER BY created_at`,
  );
  return rows;
}

/** The day's spend counters against the records, and what a decision reads (the Redis copy, or SQL). */
async function expectCountersEqualRecords(db: pg.Client, daemon: DaemonProcess) {
  const {
    rows: [totals],
  } = await db.query(`
    SELECT (SELECT coalesce(sum(spend_micros), 0) FROM usage_daily)::bigint AS ws_spend,
      (SELECT coalesce(sum(spend_micros), 0) FROM user_usage_daily)::bigint AS user_spend,
      (SELECT coalesce(sum(round(cost_usd * 1000000)), 0) FROM steps WHERE cost_usd IS NOT NULL)::bigint AS step_spend,
      (SELECT coalesce(sum(total_cost_usd * 1000000), 0) FROM run_totals)::bigint AS run_spend`);
  expect(totals.ws_spend).toBe(totals.step_spend);
  expect(totals.user_spend).toBe(totals.step_spend);
  expect(totals.run_spend).toBe(totals.step_spend);
  const usage = (await daemon.request('GET', '/v1/usage?days=1')).body;
  expect(Math.round(usage.workspace_daily_spend_usd * 1e6)).toBe(Number(totals.ws_spend));
  return Number(totals.ws_spend);
}

/**
 * The Redis copy of today's spend as a kill between a result's commit and its raise of the copy
 * leaves it: behind the records (here, as before any result: 0). The window is a few
 * microseconds wide for a real SIGKILL, so it is set, not raced for.
 */
async function loseTheLastRaises(daemon: DaemonProcess) {
  const redis = new Redis(REDIS_URL);
  try {
    const keys: string[] = [];
    for await (const batch of redis.scanStream({ match: `${daemon.redisKeyPrefix}*spend:*`, count: 1000 })) {
      keys.push(...(batch as string[]));
    }
    expect(keys.length).toBeGreaterThan(0);
    for (const key of keys) await redis.set(key, '0', 'KEEPTTL');
  } finally {
    redis.disconnect();
  }
}

/** What `docs/guarantees.md` promises after a crash: `reconcile --dry-run` finds no drift (exit 0). */
async function expectNoDrift(daemon: DaemonProcess) {
  const dry = await runCli(['reconcile', '--dry-run'], {
    DATABASE_URL: daemon.databaseUrl,
    REDIS_URL,
    RUNGUARD_REDIS_KEY_PREFIX: daemon.redisKeyPrefix,
  });
  expect({ code: dry.code, stdout: dry.stdout, stderr: dry.stderr }).toMatchObject({
    code: 0,
    stdout: expect.stringMatching(/^No drift since/),
    stderr: '',
  });
}

async function setUp(daemon: DaemonProcess, receiver: Receiver) {
  await daemon.request('PUT', `/v1/model-pricing/${MODEL}`, {
    input_cost_per_token: 0.00001,
    output_cost_per_token: 0.00004,
  });
  const endpoint = await daemon.request('POST', '/v1/webhooks', {
    url: `${receiver.url}/lost`,
    events: ['result.lost'],
  });
  expect(endpoint.status).toBe(201);
  receiver.secrets.set('/lost', endpoint.body.secret);
}

// The three settings below share nothing (each its database, upstream, receiver and daemons), and
// spend most of their time in daemons' starts and leases: they run at once.
describe('a daemon on Postgres and Redis killed with calls in flight, then restarted', { concurrent: true }, () => {
  let upstream: FakeUpstream;
  let receiver: Receiver;
  let daemon: DaemonProcess;
  let db: pg.Client;

  beforeAll(async () => {
    await clearOfUtcMidnight();
    upstream = await startFakeUpstream();
    receiver = await startReceiver();
    daemon = await startDaemonProcess({
      env: { ...FAST_RECOVERY, RUNGUARD_OPENAI_UPSTREAM: upstream.url },
      startTimeoutMs: START_MS,
    });
    db = new pg.Client({ connectionString: daemon.databaseUrl });
    await db.connect();
    await setUp(daemon, receiver);
  }, MIDNIGHT_HOOK_TIMEOUT_MS);
  afterAll(async () => {
    await db?.end();
    await daemon?.close();
    await receiver?.close();
    await upstream?.close();
  });

  it(
    'when it restarts, then its unfinished steps are FAILED RESULT_LOST at their estimate, their runs ended, the counters and webhooks told',
    { timeout: 2 * START_MS },
    async () => {
      // Answered before the kill: their results are written, and must stay as they are.
      const answered = await Promise.all([0, 1, 2].map(() => call(daemon, { delayMs: 0, user: 'quick' })));
      expect(answered.map((a) => a.status)).toEqual([200, 200, 200]);
      await until(
        'the answered results written',
        async () => (await steps(db)).every((s) => s.status === 'COMPLETED'),
        5_000,
      );
      const before = new Map((await steps(db)).map((s) => [s.id, s]));
      // Each answered call's lag from its answer to its durable result is observed (once the
      // counter copy is raised too: a moment after the record shows the step COMPLETED).
      const lagCount = async () => {
        const metrics = await (await fetch(`${daemon.url}/metrics`)).text();
        return Number(/^runguard_proxy_result_lag_seconds_count\{provider="openai"\} (\d+)/m.exec(metrics)?.[1]);
      };
      await until('the answered results observed', async () => (await lagCount()) >= 3, 5_000);
      expect(await lagCount()).toBe(3);

      // In flight at the kill: four calls of runs of their own, two in a run the client started.
      const runId = (await daemon.request('POST', '/v1/runs', { user_id: 'exec' })).body.id as string;
      const inFlight = [
        ...[0, 1, 2, 3].map(() => call(daemon, { delayMs: HELD_MS, user: 'slow' })),
        ...[0, 1].map(() => call(daemon, { delayMs: HELD_MS, runId })),
      ];
      await until('six calls forwarded', async () => upstream.requests.length >= 3 + 6, 10_000);
      await daemon.kill('SIGKILL');
      expect((await Promise.all(inFlight)).map((r) => r.status)).toEqual([0, 0, 0, 0, 0, 0]);
      await loseTheLastRaises(daemon);

      const orphaned = (await steps(db)).filter((s) => s.status === 'ALLOWED');
      expect(orphaned).toHaveLength(6);
      for (const step of orphaned) {
        expect(step.daemon_id).not.toBeNull();
        expect(Number(step.estimate_micros)).toBeGreaterThan(0);
      }

      const restarted = Date.now();
      await daemon.start();
      const lost = await until(
        'the orphaned steps recovered',
        async () => {
          const now = await steps(db);
          const ended = now.filter((s) => orphaned.some((o) => o.id === s.id) && s.status !== 'ALLOWED');
          return ended.length === orphaned.length ? ended : null;
        },
        RECOVERY_WITHIN_MS,
      );
      expect(Date.now() - restarted).toBeLessThan(RECOVERY_WITHIN_MS);
      for (const step of lost) {
        expect(step.status).toBe('FAILED');
        expect(step.output).toEqual({ error: 'RESULT_LOST', charged: 'estimate' });
        expect(step.cost_micros).toBe(step.estimate_micros);
      }
      // The calls answered before the kill are as their results wrote them.
      for (const step of (await steps(db)).filter((s) => before.has(s.id))) expect(step).toEqual(before.get(step.id));

      // Runs of the calls' own are ended; the client's run is its client's to end.
      const { rows: runs } = await db.query<{ id: string; status: string; ended_at: Date | null }>(
        'SELECT id::text, status, ended_at FROM runs',
      );
      const lostRuns = new Set(lost.filter((s) => s.run_id !== runId).map((s) => s.run_id));
      expect(lostRuns.size).toBe(4);
      for (const run of runs.filter((r) => lostRuns.has(r.id))) expect(run).toMatchObject({ status: 'FAILED' });
      expect(runs.find((r) => r.id === runId)).toMatchObject({ status: 'RUNNING', ended_at: null });
      expect(runs.filter((r) => r.status === 'RUNNING')).toHaveLength(1);
      expect((await daemon.request('GET', '/v1/usage')).body.concurrent_runs).toBe(1);

      // The lost spend counts: in the records, the Redis copy decisions read, and each run's total.
      const lostMicros = lost.reduce((sum, s) => sum + Number(s.cost_micros), 0);
      const answeredMicros = [...before.values()].reduce((sum, s) => sum + Number(s.cost_micros), 0);
      expect(await expectCountersEqualRecords(db, daemon)).toBe(lostMicros + answeredMicros);
      const run = (await daemon.request('GET', `/v1/runs/${lost[0]!.run_id}`)).body;
      expect(Math.round(run.total_cost_usd * 1e6)).toBe(
        lost.filter((s) => s.run_id === lost[0]!.run_id).reduce((sum, s) => sum + Number(s.cost_micros), 0),
      );
      expect(run.steps[0]).toMatchObject({ status: 'FAILED', output_data: { error: 'RESULT_LOST' } });

      // One signed result.lost per step.
      const events = await receiver.waitFor((got) => got.length >= lost.length, RECOVERY_WITHIN_MS);
      expect(events.every((e) => e.verified && e.json.type === 'result.lost')).toBe(true);
      expect(events.map((e) => e.json.data.step_id).sort()).toEqual(lost.map((s) => s.id).sort());
      expect(events[0]!.json.data).toMatchObject({ provider: 'openai', model: MODEL });
      // A second pass (the timer's) finds nothing more: no event twice.
      await new Promise((r) => setTimeout(r, 1_000));
      expect(receiver.unique()).toHaveLength(lost.length);
      expect(await expectCountersEqualRecords(db, daemon)).toBe(lostMicros + answeredMicros);
      await expectNoDrift(daemon);
    },
  );
});

describe('two daemons on one Postgres and Redis, one killed with calls in flight', { concurrent: true }, () => {
  let upstream: FakeUpstream;
  let receiver: Receiver;
  let first: DaemonProcess;
  let survivor: DaemonProcess;
  let db: pg.Client;

  beforeAll(async () => {
    await clearOfUtcMidnight();
    upstream = await startFakeUpstream();
    receiver = await startReceiver();
    const env = { ...FAST_RECOVERY, RUNGUARD_OPENAI_UPSTREAM: upstream.url };
    first = await startDaemonProcess({ env, startTimeoutMs: START_MS });
    survivor = await startDaemonProcess({ sharing: first, env, startTimeoutMs: START_MS });
    db = new pg.Client({ connectionString: first.databaseUrl });
    await db.connect();
    await setUp(first, receiver);
  }, MIDNIGHT_HOOK_TIMEOUT_MS);
  afterAll(async () => {
    await db?.end();
    await survivor?.close();
    await first?.close();
    await receiver?.close();
    await upstream?.close();
  });
  afterEach(() => {
    receiver.received.length = 0;
  });

  it.sequential(
    "when one is killed, then the survivor recovers the dead one's steps and never touches its own in flight",
    { timeout: 2 * START_MS },
    async () => {
      const dying = [0, 1, 2].map(() => call(first, { delayMs: HELD_MS, user: 'a' }));
      // The survivor's own calls are held until the recovery was checked, then answer.
      const living = [0, 1, 2].map(() => call(survivor, { delayMs: 0, hold: 'living', user: 'b' }));
      await until('six calls forwarded', async () => upstream.requests.length >= 6, 10_000);
      const { rows: instances } = await db.query<{ id: number }>('SELECT id FROM daemon_instances WHERE pid = $1', [
        first.pid,
      ]);
      expect(instances).toHaveLength(1);
      const deadId = instances[0]!.id;
      expect((await steps(db)).filter((s) => s.daemon_id === deadId)).toHaveLength(3);
      await first.kill('SIGKILL');
      const killed = Date.now();

      await until(
        "the dead daemon's steps recovered",
        async () => (await steps(db)).filter((s) => s.daemon_id === deadId && s.status === 'FAILED').length === 3,
        RECOVERY_WITHIN_MS,
      );
      // Its process is gone from this machine: the next pass (every 250 ms) sees it, a loaded machine permitting.
      expect(Date.now() - killed).toBeLessThan(8_000);
      const now = await steps(db);
      for (const step of now.filter((s) => s.daemon_id === deadId)) {
        expect(step.output).toMatchObject({ error: 'RESULT_LOST' });
        expect(step.cost_micros).toBe(step.estimate_micros);
      }
      // The survivor's calls are still in flight, untouched.
      expect(now.filter((s) => s.daemon_id !== deadId).map((s) => s.status)).toEqual(['ALLOWED', 'ALLOWED', 'ALLOWED']);
      const events = await receiver.waitFor((got) => got.length >= 3, RECOVERY_WITHIN_MS);
      expect(events.map((e) => e.json.data.step_id).sort()).toEqual(
        now
          .filter((s) => s.daemon_id === deadId)
          .map((s) => s.id)
          .sort(),
      );

      // They answer, and record their own results.
      upstream.release('living');
      expect((await Promise.all(living)).map((r) => r.status)).toEqual([200, 200, 200]);
      expect((await Promise.all(dying)).map((r) => r.status)).toEqual([0, 0, 0]);
      await until(
        "the survivor's results written",
        async () => (await steps(db)).filter((s) => s.status === 'COMPLETED').length === 3,
        5_000,
      );
      // A run of a call's own ends in a commit of its own, after its result's: wait for it, not for a race.
      await until(
        'every run ended',
        async () => {
          const { rows: running } = await db.query(`SELECT count(*)::int AS n FROM runs WHERE status = 'RUNNING'`);
          return running[0].n === 0;
        },
        5_000,
      );
      await expectCountersEqualRecords(db, survivor);
      expect(receiver.unique()).toHaveLength(3);
      await expectNoDrift(survivor);
    },
  );

  it.sequential(
    'when one stops answering but lives (SIGSTOP), then its lease lapses, its calls are recovered, and it goes on as a new instance',
    { timeout: 2 * START_MS },
    async () => {
      await first.start();
      const stepsBefore = (await steps(db)).length;
      const held = call(first, { delayMs: 0, hold: 'frozen', user: 'frozen' });
      await until('the call forwarded', async () => (await steps(db)).length === stepsBefore + 1, 10_000);
      const { rows: instances } = await db.query<{ id: number }>(
        'SELECT id FROM daemon_instances WHERE pid = $1 AND stopped_at IS NULL AND recovered_at IS NULL',
        [first.pid],
      );
      const frozenId = instances[0]!.id;
      process.kill(first.pid!, 'SIGSTOP');
      const stopped = Date.now();
      try {
        // Its process still exists: only the lapse of its heartbeat tells it dead.
        const [lost] = await until(
          'the frozen daemon found dead',
          async () => {
            const found = (await steps(db)).filter((s) => s.daemon_id === frozenId && s.status === 'FAILED');
            return found.length === 1 ? found : null;
          },
          RECOVERY_WITHIN_MS,
        );
        expect(Date.now() - stopped).toBeGreaterThanOrEqual(1_000);
        expect(lost!.output).toMatchObject({ error: 'RESULT_LOST' });
        expect(lost!.cost_micros).toBe(lost!.estimate_micros);
      } finally {
        process.kill(first.pid!, 'SIGCONT');
        upstream.release('frozen');
      }
      // It wakes: the call is answered, but its result is refused (the step was ended), and the
      // daemon takes a new id for what follows.
      expect((await held).status).toBe(200);
      const renewed = await until(
        'a new instance registered',
        async () => {
          const { rows } = await db.query<{ id: number }>(
            'SELECT id FROM daemon_instances WHERE pid = $1 AND recovered_at IS NULL AND stopped_at IS NULL',
            [first.pid],
          );
          return rows[0]?.id;
        },
        5_000,
      );
      expect(renewed).not.toBe(frozenId);
      expect((await call(first, { delayMs: 0, user: 'after' })).status).toBe(200);
      const latest = await until(
        'its result written',
        async () => ((await steps(db)).at(-1)?.status === 'COMPLETED' ? (await steps(db)).at(-1) : null),
        5_000,
      );
      expect(latest.daemon_id).toBe(renewed);
      expect((await steps(db)).filter((s) => s.daemon_id === frozenId)).toMatchObject([
        { status: 'FAILED', output: { error: 'RESULT_LOST' } },
      ]);
      await expectCountersEqualRecords(db, survivor);
    },
  );
});

describe('an embedded daemon killed with calls in flight, then restarted', { concurrent: true }, () => {
  let upstream: FakeUpstream;
  let receiver: Receiver;
  let daemon: DaemonProcess;

  beforeAll(async () => {
    await clearOfUtcMidnight();
    upstream = await startFakeUpstream();
    receiver = await startReceiver();
    // No database URL: PGlite in the data dir, one daemon at a time (its directory lock).
    daemon = await startDaemonProcess({
      env: {
        ...FAST_RECOVERY,
        // No pass on a timer: what is recovered is recovered by the start.
        RUNGUARD_RESULT_RECOVERY_INTERVAL_MS: '0',
        RUNGUARD_OPENAI_UPSTREAM: upstream.url,
        DATABASE_URL: '',
        REDIS_URL: '',
      },
      // The restart is under test, not the first start's initdb.
      embeddedTemplate: true,
      startTimeoutMs: START_MS,
    });
    await setUp(daemon, receiver);
  }, MIDNIGHT_HOOK_TIMEOUT_MS);
  afterAll(async () => {
    await daemon?.close();
    await receiver?.close();
    await upstream?.close();
  });

  it(
    'when it restarts, then it ends what its last life left unfinished at once',
    { timeout: 2 * START_MS },
    async () => {
      expect((await call(daemon, { delayMs: 0 })).status).toBe(200);
      const inFlight = [0, 1, 2].map(() => call(daemon, { delayMs: HELD_MS }));
      await until('three calls forwarded', async () => upstream.requests.length >= 4, 10_000);
      const running = (await daemon.request('GET', '/v1/runs?status=RUNNING')).body.items.map(
        (r: { id: string }) => r.id,
      );
      expect(running).toHaveLength(3);
      await daemon.kill('SIGKILL');
      expect((await Promise.all(inFlight)).map((r) => r.status)).toEqual([0, 0, 0]);

      // Its first pass ends before it listens: once it answers, its last life's calls are ended.
      await daemon.start();
      const runs = await until(
        'the runs ended',
        async () => {
          const found = await Promise.all(
            running.map(async (id: string) => (await daemon.request('GET', `/v1/runs/${id}`)).body),
          );
          return found.every((run) => run.status !== 'RUNNING') ? found : null;
        },
        0,
      );
      for (const run of runs) {
        expect(run.status).toBe('FAILED');
        expect(run.steps).toHaveLength(1);
        expect(run.steps[0]).toMatchObject({
          status: 'FAILED',
          output_data: { error: 'RESULT_LOST', charged: 'estimate' },
        });
        expect(run.steps[0].cost_usd).toBeGreaterThan(0);
        expect(run.total_cost_usd).toBe(run.steps[0].cost_usd);
      }
      const all = (await daemon.request('GET', '/v1/runs?per_page=100')).body.items;
      const spent = all.reduce(
        (sum: number, run: { total_cost_usd: number }) => sum + Math.round(run.total_cost_usd * 1e6),
        0,
      );
      expect(Math.round((await daemon.request('GET', '/v1/usage')).body.workspace_daily_spend_usd * 1e6)).toBe(spent);
      expect((await daemon.request('GET', '/v1/usage')).body.concurrent_runs).toBe(0);
      const events = await receiver.waitFor((got) => got.length >= 3, RECOVERY_WITHIN_MS);
      expect(events.map((e) => e.json.data.run_id).sort()).toEqual([...running].sort());
    },
  );
});
