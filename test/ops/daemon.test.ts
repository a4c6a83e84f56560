/**
 * The real daemon process: metrics on a live instance, graceful shutdown with a request in
 * flight, the grace period cutting what does not finish, and the stale-run sweep it runs.
 */
import { request as httpRequest, type ClientRequest } from 'node:http';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { caller } from '../support/harness.js';
import { spawnDaemonOnPostgres } from '../support/daemon.js';
import { metricValue, parseMetrics } from '../support/prometheus.js';

type Daemon = Awaited<ReturnType<typeof spawnDaemonOnPostgres>>;
const daemons: Daemon[] = [];
afterEach(async () => {
  for (const d of daemons.splice(0)) await d.close();
});
const spawnOne = async (env: Record<string, string> = {}) => {
  const d = await spawnDaemonOnPostgres({ env });
  daemons.push(d);
  return d;
};

/** A POST whose body is only half sent: in flight until `finish()`. */
function halfSentStart(url: string, apiKey: string) {
  const body = JSON.stringify({ user_id: 'in-flight' });
  let req!: ClientRequest;
  const response = new Promise<{ status: number; body: string }>((resolve, reject) => {
    req = httpRequest(
      `${url}/v1/runs`,
      {
        method: 'POST',
        headers: {
          authorization: `Bearer ${apiKey}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode!, body: text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
  });
  req.write(body.slice(0, 5));
  req.flushHeaders();
  return { response, finish: () => req.end(body.slice(5)) };
}

/** Polls until `predicate` holds; the deadline only turns a hang into a named failure. */
const waitFor = async (what: string, predicate: () => boolean | Promise<boolean>, timeoutMs = 20_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

/** The daemon's JSON log lines so far (it also prints plain lines, e.g. the bootstrap key). */
const logLines = (d: Daemon): Record<string, any>[] =>
  d
    .stdout()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, any>);

/**
 * Whether a new connection is refused. The log line comes just before the daemon closes its
 * socket, and a busy machine may run the test before the daemon's next step: asked until it is.
 */
const connectionRefused = (url: string) =>
  fetch(`${url}/health`).then(
    () => false,
    (error: { cause?: { code?: string } }) => error.cause?.code === 'ECONNREFUSED',
  );

/**
 * Fastify logs a request once its headers are parsed (at debug: the daemon's own line comes at
 * the answer): from then on the server counts the connection as busy, and a close lets it finish
 * rather than cutting it as idle. The daemons of the tests that wait for it log at debug.
 */
const requestArrived = (d: Daemon, method: string, url: string) =>
  waitFor(`the daemon to read the headers of ${method} ${url}`, () =>
    logLines(d).some((l) => l.msg === 'incoming request' && l.req?.method === method && l.req?.url === url),
  );

describe('the daemon process', () => {
  it('when scraped, then /metrics has process metrics and decision counters that follow starts and blocks', async () => {
    const d = await spawnOne();
    const api = caller(d.url, d.apiKey);
    await api.request('POST', '/v1/runs', { user_id: 'a' });
    await api.request('POST', '/v1/workspace/kill-switch', { active: true });
    await api.request('POST', '/v1/runs', { user_id: 'a' });
    const samples = parseMetrics((await api.request('GET', '/metrics')).body);
    expect(metricValue(samples, 'runguard_decisions_total', { boundary: 'run_start', outcome: 'ALLOW' })).toBe(1);
    expect(
      metricValue(samples, 'runguard_decisions_total', {
        boundary: 'run_start',
        outcome: 'DENY',
        reason: 'KILL_SWITCH_ACTIVE',
      }),
    ).toBe(1);
    expect(metricValue(samples, 'process_resident_memory_bytes')).toBeGreaterThan(0);
    // The bootstrap key went to the terminal and the key file, never into a log line.
    expect(d.stdout()).toContain('API key: lg_');
    expect(
      d
        .stdout()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .join('\n'),
    ).not.toContain(d.apiKey!.slice(16));
  });

  it('when SIGTERM arrives with a request in flight, then it completes (2xx), new connections are refused, and the daemon exits 0', async () => {
    const d = await spawnOne({ RUNGUARD_LOG_LEVEL: 'debug' });
    const inFlight = halfSentStart(d.url, d.apiKey!);
    await requestArrived(d, 'POST', '/v1/runs');
    d.process.kill('SIGTERM');
    await waitFor('shutdown to begin', () => d.stdout().includes('shutting down'));
    await waitFor('new connections to be refused', () => connectionRefused(d.url));
    inFlight.finish();
    const res = await inFlight.response;
    expect(res.status).toBe(201);
    const run = JSON.parse(res.body);
    expect(run).toMatchObject({ user_id: 'in-flight', status: 'RUNNING' });
    expect(await d.exited).toBe(0);
    // The record it answered for is there, whole.
    const client = new pg.Client({ connectionString: d.database.url });
    await client.connect();
    try {
      const { rows } = await client.query('SELECT status, user_id FROM runs WHERE id = $1', [run.id]);
      expect(rows).toEqual([{ status: 'RUNNING', user_id: 'in-flight' }]);
    } finally {
      await client.end();
    }
  });

  it('when SIGTERM arrives while another reconcile holds the lock, then connections are refused at once and the daemon exits, the lock still held', async () => {
    // Debug: each pass that finds the lock taken says so.
    const d = await spawnOne({ RUNGUARD_RECONCILE_INTERVAL_MS: '50', RUNGUARD_LOG_LEVEL: 'debug' });
    const skipped = () => logLines(d).filter((l) => l.msg?.startsWith('reconcile pass skipped')).length;
    // Another daemon's (or the CLI's) reconcile holds the lock for as long as this test wants.
    const other = new pg.Client({ connectionString: d.database.url });
    await other.connect();
    try {
      await other.query('BEGIN');
      await other.query('SELECT pg_advisory_xact_lock(7318842003)');
      // Passes skip only while another holds the lock: several come and go meanwhile.
      await waitFor("two of the daemon's passes to find the lock held", () => skipped() >= 2);
      d.process.kill('SIGTERM');
      await waitFor('shutdown to begin', () => d.stdout().includes('shutting down'));
      await waitFor('new connections to be refused', () => connectionRefused(d.url));
      // A pass waiting on the lock would keep it running for as long as the lock is held, i.e.
      // forever here: the bound only names that failure before the test's own timeout does.
      const exited = await Promise.race([d.exited, new Promise((r) => setTimeout(() => r('still running'), 20_000))]);
      expect(exited).toBe(0);
      expect(d.stdout()).not.toContain('reconciliation failed');
    } finally {
      await other.end();
    }
  });

  it('when a request outlives the grace period, then its connection is cut and the daemon still exits 0', async () => {
    const d = await spawnOne({ RUNGUARD_SHUTDOWN_GRACE_MS: '300', RUNGUARD_LOG_LEVEL: 'debug' });
    const inFlight = halfSentStart(d.url, d.apiKey!);
    await requestArrived(d, 'POST', '/v1/runs');
    d.process.kill('SIGTERM');
    await expect(inFlight.response).rejects.toMatchObject({ code: 'ECONNRESET' });
    expect(await d.exited).toBe(0);
    // The configured grace cut it, not the 10 s default nor the request's own timeout.
    expect(logLines(d).filter((l) => l.msg?.startsWith('shutdown grace period over'))).toEqual([
      expect.objectContaining({ graceMs: 300 }),
    ]);
  });

  it('when a run stays idle past the configured time, then the daemon ends it FAILED and frees its slot', async () => {
    const d = await spawnOne({ RUNGUARD_STALE_RUN_IDLE_MS: '1000', RUNGUARD_STALE_RUN_SWEEP_INTERVAL_MS: '100' });
    const api = caller(d.url, d.apiKey);
    const idle = (await api.request('POST', '/v1/runs', { user_id: 'idle' })).body;
    await waitFor('the sweep', async () => (await api.request('GET', `/v1/runs/${idle.id}`)).body.status === 'FAILED');
    const samples = parseMetrics((await api.request('GET', '/metrics')).body);
    expect(metricValue(samples, 'runguard_stale_runs_ended_total')).toBe(1);
    expect(d.stdout()).toContain('ended stale runs as FAILED');
  });
});
