/**
 * `/metrics` through real HTTP: decision counters move with decisions, latency is labelled by
 * route pattern, store failures are counted, and each app has a registry of its own.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { buildApp } from '../../src/api/app.js';
import { createLogger } from '../../src/logger.js';
import {
  createMetrics,
  formatOverheadMs,
  OVERHEAD_HEADER,
  ProxyCallTimer,
  setOverheadHeader,
} from '../../src/metrics.js';
import type { CounterStore } from '../../src/store/counters/counters.js';
import type { Db } from '../../src/store/db.js';
import { createApiKey, createWorkspace } from '../../src/store/workspaces.js';
import { caller, startTestApi, TEST_AUTH, type TestApi } from '../support/harness.js';
import { metricValue, parseMetrics } from '../support/prometheus.js';

const scrape = async (api: { request: TestApi['request'] }) => {
  const res = await api.request('GET', '/metrics');
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toContain('text/plain');
  return { text: res.body as string, samples: parseMetrics(res.body as string) };
};

describe('metrics', () => {
  let api: TestApi;
  let other: TestApi;
  beforeAll(async () => {
    [api, other] = await Promise.all([startTestApi('postgres+redis'), startTestApi('postgres+sql')]);
  });
  afterAll(async () => {
    await Promise.all([api?.close(), other?.close()]);
  });

  it('when a run starts and another start is blocked, then the decision counters move by one each', async () => {
    const decisions = (samples: ReturnType<typeof parseMetrics>, labels: Record<string, string>) =>
      metricValue(samples, 'runguard_decisions_total', labels);
    const before = (await scrape(api)).samples;
    const run = (await api.request('POST', '/v1/runs', { user_id: 'm' })).body;
    await api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 1 });
    await api.request('POST', '/v1/workspace/kill-switch', { active: true });
    expect((await api.request('POST', '/v1/runs', { user_id: 'm' })).body.status).toBe('BLOCKED');
    expect((await api.request('POST', `/v1/runs/${run.id}/steps`, { type: 'INPUT', sequence: 2 })).body.status).toBe(
      'BLOCKED',
    );
    await api.request('POST', '/v1/workspace/kill-switch', { active: false });
    const after = (await scrape(api)).samples;
    const delta = (labels: Record<string, string>) => decisions(after, labels) - decisions(before, labels);
    expect(delta({ boundary: 'run_start', outcome: 'ALLOW', reason: 'none' })).toBe(1);
    expect(delta({ boundary: 'run_start', outcome: 'DENY', reason: 'KILL_SWITCH_ACTIVE' })).toBe(1);
    expect(delta({ boundary: 'step', outcome: 'ALLOW', reason: 'none' })).toBe(1);
    expect(delta({ boundary: 'step', outcome: 'DENY', reason: 'KILL_SWITCH_ACTIVE' })).toBe(1);
  });

  it('when an idempotent start is replayed, then the decision is counted once', async () => {
    const key = { 'idempotency-key': `k-${Date.now()}` };
    const before = metricValue((await scrape(api)).samples, 'runguard_decisions_total', { boundary: 'run_start' });
    await api.request('POST', '/v1/runs', { user_id: 'idem' }, key);
    await api.request('POST', '/v1/runs', { user_id: 'idem' }, key);
    expect(
      metricValue((await scrape(api)).samples, 'runguard_decisions_total', { boundary: 'run_start' }) - before,
    ).toBe(1);
  });

  it('when requests carry ids, then latency is labelled by the route pattern, never the raw URL', async () => {
    const run = (await api.request('POST', '/v1/runs', { user_id: 'route' })).body;
    await api.request('GET', `/v1/runs/${run.id}`);
    await api.request('GET', '/no/such/route/abc123');
    const { text, samples } = await scrape(api);
    expect(
      metricValue(samples, 'runguard_http_request_duration_seconds_count', {
        method: 'GET',
        route: '/v1/runs/:run_id',
        status_code: '200',
      }),
    ).toBeGreaterThanOrEqual(1);
    expect(
      metricValue(samples, 'runguard_http_request_duration_seconds_count', { route: 'unmatched', status_code: '404' }),
    ).toBeGreaterThanOrEqual(1);
    expect(text).not.toContain(run.id);
    expect(text).not.toContain('abc123');
  });

  it('when two apps run in one process, then each has its own registry, with process metrics', async () => {
    const mine = (await scrape(api)).samples;
    const theirs = (await scrape(other)).samples;
    expect(metricValue(mine, 'runguard_decisions_total')).toBeGreaterThan(0);
    expect(metricValue(theirs, 'runguard_decisions_total')).toBe(0);
    for (const samples of [mine, theirs]) {
      expect(samples.some((s) => s.name === 'process_cpu_user_seconds_total')).toBe(true);
      expect(samples.some((s) => s.name === 'nodejs_heap_size_used_bytes')).toBe(true);
    }
  });
});

describe('store error metrics', () => {
  it('when the counter store and the database fail, then their error counters say which operation', async () => {
    const stores = await (await import('../support/harness.js')).openTestStores('postgres+sql');
    let failing = false;
    const downError = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    const db: Db = {
      ...stores.db,
      kind: stores.db.kind,
      query: (sql, params) =>
        failing && sql === 'SELECT 1' ? Promise.reject(downError()) : stores.db.query(sql, params),
      transaction: (fn) => stores.db.transaction(fn),
      close: () => stores.db.close(),
    };
    const counters: CounterStore = Object.create(stores.counters, {
      readDecisionInputs: {
        value: (scope: Parameters<CounterStore['readDecisionInputs']>[0]) =>
          failing ? Promise.reject(new Error('redis down')) : stores.counters.readDecisionInputs(scope),
      },
    });
    const ws = await createWorkspace(stores.db, 't', 'scale');
    const key = await createApiKey(stores.db, ws.id);
    const app = await buildApp({
      db,
      counters,
      clock: { now: () => new Date() },
      logger: createLogger('silent'),
      version: 't',
      bodyLimitBytes: 1 << 20,
      auth: TEST_AUTH,
    });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const client = caller(url, key.apiKey);
      failing = true;
      expect((await client.request('POST', '/v1/runs', { user_id: 'x' })).status).toBe(500);
      expect((await client.request('GET', '/health')).status).toBe(503);
      failing = false;
      const { samples } = await scrape(client);
      expect(metricValue(samples, 'runguard_counter_store_errors_total', { operation: 'readDecisionInputs' })).toBe(1);
      expect(metricValue(samples, 'runguard_database_errors_total', { operation: 'query', code: 'ECONNREFUSED' })).toBe(
        1,
      );
    } finally {
      await app.close();
      await stores.close();
    }
  });
});

describe('proxy timing hook', () => {
  it('when a proxied call is timed, then overhead is the total minus the upstream wait, in both histograms', async () => {
    const metrics = createMetrics({ processMetrics: false });
    // The timer reads process.hrtime: here a clock the test moves, so the sums are exact on any
    // machine (sleeps on a loaded one wake late, by more than any margin a test could allow).
    let now = 1_000_000_000n;
    const clock = vi.spyOn(process.hrtime, 'bigint').mockImplementation(() => now);
    let overhead: number;
    let again: number;
    try {
      const timer = new ProxyCallTimer(metrics, 'openai');
      now += 30_000_000n; // the daemon's own 30 ms
      timer.upstreamStarted();
      now += 60_000_000n; // 60 ms waiting for the upstream
      overhead = timer.finish('ok');
      now += 5_000_000n;
      again = timer.finish('ok');
    } finally {
      clock.mockRestore();
    }
    expect(overhead).toBe(30); // not the 60 ms spent upstream
    expect(again).toBeGreaterThanOrEqual(overhead); // A second finish records nothing.
    const samples = parseMetrics((await metrics.scrape()).body);
    expect(
      metricValue(samples, 'runguard_proxy_upstream_duration_seconds_count', { provider: 'openai', outcome: 'ok' }),
    ).toBe(1);
    expect(metricValue(samples, 'runguard_proxy_upstream_duration_seconds_sum', { provider: 'openai' })).toBeCloseTo(
      0.06,
      9,
    );
    expect(metricValue(samples, 'runguard_proxy_overhead_seconds_sum', { provider: 'openai' })).toBeCloseTo(0.03, 9);
    expect(metricValue(samples, 'runguard_proxy_overhead_seconds_count', { provider: 'openai' })).toBe(1);

    const headers: Record<string, string> = {};
    setOverheadHeader({ header: (name: string, value: string) => (headers[name] = value) }, 1.23456);
    setOverheadHeader({ setHeader: (name: string, value: string) => (headers[`${name}-node`] = value) }, -1);
    expect(headers).toEqual({ [OVERHEAD_HEADER]: '1.23', [`${OVERHEAD_HEADER}-node`]: '0.00' });
    expect(formatOverheadMs(12)).toBe('12.00');
  });
});
