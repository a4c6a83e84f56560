/**
 * Unpriced models are not free (issue #34, part 2): a new workspace starts with the shipped
 * catalog, `unpriced_models: "deny"` denies a model call of a model without a price (rule
 * model_priced, after rule 4), and whatever the setting an unpriced call is visible (a warning
 * once per model and workspace, a Prometheus counter, `unpriced` in GET /v1/usage and runs show).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bootstrapWorkspace } from '../../src/daemon/bootstrap.js';
import { printRun } from '../../src/cli/commands/runs.js';
import { createOutput } from '../../src/cli/output.js';
import { BACKENDS, caller, openTestStores, startProxyTestApi, type ProxyTestApi } from '../support/harness.js';
import { captureLog } from '../support/log-capture.js';
import { metricValue, parseMetrics } from '../support/prometheus.js';

const CATALOG = new URL('../../config/pricing-catalog.json', import.meta.url);
const catalogModels = async () =>
  (JSON.parse(await readFile(CATALOG, 'utf8')).models as { model: string }[]).map((m) => m.model);

describe.each(BACKENDS)('unpriced models on %s', (backend) => {
  let api: ProxyTestApi;
  const log = captureLog('info');

  beforeAll(async () => {
    api = await startProxyTestApi(backend, { logger: log.logger });
    expect(
      (
        await api.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
          input_cost_per_token: 0.000001,
          output_cost_per_token: 0.000004,
        })
      ).status,
    ).toBe(200);
  });
  afterAll(async () => {
    await api?.close();
  });

  const call = (model: string, headers: Record<string, string> = {}, key = api.apiKey) =>
    fetch(`${api.url}/proxy/openai/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer sk-provider',
        'x-runguard-key': key,
        'x-runguard-user-id': 'u',
        ...headers,
      },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }] }),
    });

  it('when an account registers, then its workspace starts with the shipped catalog', async () => {
    const registered = await caller(api.url, null).request('POST', '/v1/auth/register', {
      email: `cat-${backend}@example.com`,
      password: 'correct horse battery',
    });
    expect(registered.status).toBe(201);
    const prices = (await caller(api.url, registered.body.api_key).request('GET', '/v1/model-pricing')).body;
    expect(prices.map((p: any) => p.model).sort()).toEqual([...new Set(await catalogModels())].sort());
  });

  it('when a daemon starts on an empty database, then the bootstrap workspace starts with the shipped catalog', async () => {
    const stores = await openTestStores(backend);
    const dir = await mkdtemp(join(tmpdir(), 'rg-boot-'));
    try {
      const boot = await bootstrapWorkspace(stores.db, 'scale', dir);
      const { rows } = await stores.db.query<{ model: string }>(
        'SELECT model FROM model_pricing WHERE workspace_id = $1 AND is_active',
        [boot!.workspaceId],
      );
      expect(rows.map((r) => r.model).sort()).toEqual([...new Set(await catalogModels())].sort());
    } finally {
      await stores.close();
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000); // a second embedded database starts slowly on a busy machine

  it('when unpriced_models is "deny", then an unpriced model is denied MODEL_NOT_PRICED after rule 4, and a priced one passes it', async () => {
    const ws = await api.newWorkspace('scale');
    await ws.api.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
      input_cost_per_token: 0.000001,
      output_cost_per_token: 0.000004,
    });
    expect((await ws.api.request('PATCH', '/v1/workspace', { unpriced_models: 'deny' })).body.unpriced_models).toBe(
      'deny',
    );
    const before = api.upstream.requests.length;
    const denied = await call('gpt-4o-mni', {}, ws.apiKey);
    expect(denied.status).toBe(403);
    expect((await denied.json()).error).toMatchObject({ type: 'guardrail_denied', code: 'MODEL_NOT_PRICED' });
    expect(api.upstream.requests.length).toBe(before);
    expect((await call('gpt-4o-mini', {}, ws.apiKey)).status).toBe(200);

    // The denied call's run of its own is ended, not left holding a slot (the other's end is
    // written after its answer: wait for it).
    let runs: any[] = [];
    for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
      runs = (await ws.api.request('GET', '/v1/runs?user_id=u')).body.items;
      if (runs.every((r: any) => r.status !== 'RUNNING')) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(runs.map((r: any) => r.status).sort()).toEqual(['COMPLETED', 'FAILED']);
    const failed = (await ws.api.request('GET', `/v1/runs/${runs.find((r: any) => r.status === 'FAILED').id}`)).body;
    expect(failed.steps[0].decision).toEqual({
      outcome: 'DENY',
      reason: 'MODEL_NOT_PRICED',
      evaluated_rules: {
        kill_switch: 'PASS',
        user_blocked: 'PASS',
        workspace_daily_budget: 'PASS',
        user_daily_budget: 'PASS',
        model_priced: 'DENY',
      },
      detail: { model: 'gpt-4o-mni', unpriced_models: 'deny' },
    });
    const runId = (await ws.api.request('POST', '/v1/runs', { user_id: 'v' })).body.id;
    const step = (
      await ws.api.request('POST', `/v1/runs/${runId}/steps`, { type: 'MODEL_CALL', sequence: 1, model: 'gpt-4o-mini' })
    ).body;
    expect(Object.keys(step.decision.evaluated_rules)).toEqual([
      'kill_switch',
      'user_blocked',
      'workspace_daily_budget',
      'user_daily_budget',
      'model_priced',
    ]);
  });

  it('when unpriced_models is "allow" (the default), then the rule is not evaluated and the call is visible as unpriced', async () => {
    const ws = await api.newWorkspace('scale');
    expect((await ws.api.request('GET', '/v1/workspace')).body.unpriced_models).toBe('allow');
    const metricsBefore = metricValue(
      parseMetrics(String((await api.request('GET', '/metrics')).body)),
      'runguard_unpriced_model_calls_total',
    );
    for (let i = 0; i < 2; i++)
      expect((await call('llama3:8b', { 'x-runguard-user-id': 'local' }, ws.apiKey)).status).toBe(200);
    // Results are written after the answer: wait for them.
    let usage: any;
    for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
      usage = (await ws.api.request('GET', '/v1/usage')).body;
      if (usage.unpriced[0]?.calls === 2) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(usage.unpriced).toEqual([{ model: 'llama3:8b', calls: 2, tokens: expect.any(Number) }]);
    expect(usage.unpriced[0].tokens).toBeGreaterThan(0);
    const metricsAfter = metricValue(
      parseMetrics(String((await api.request('GET', '/metrics')).body)),
      'runguard_unpriced_model_calls_total',
    );
    expect(metricsAfter - metricsBefore).toBe(2);
    const warnings = log.lines.filter((l) => l.includes('without a price') && l.includes(ws.workspaceId));
    expect(warnings).toHaveLength(1);

    const runs = (await ws.api.request('GET', '/v1/runs?user_id=local')).body.items;
    const run = (await ws.api.request('GET', `/v1/runs/${runs[0].id}`)).body;
    expect(Object.keys(run.steps[0].decision.evaluated_rules)).not.toContain('model_priced');
    const stdout = new PassThrough();
    let printed = '';
    stdout.on('data', (chunk) => (printed += String(chunk)));
    printRun(createOutput(false, stdout), run);
    expect(printed).toMatch(/Unpriced\s+1 call, \d+ tokens \(llama3:8b\)/);
  });
});
