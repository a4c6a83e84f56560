/**
 * Proxy mode end to end: the official OpenAI and Anthropic SDKs talk to the real app on a real
 * socket, which forwards to a fake provider on loopback and records every call as a step.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { completionTokensFor, DEFAULT_REPLY, promptTokensFor } from '../support/fake-upstream.js';
import { startTestApi, type Caller, type TestApi, startProxyTestApi, type ProxyTestApi } from '../support/harness.js';
import { captureLog } from '../support/log-capture.js';
import { metricValue, parseMetrics } from '../support/prometheus.js';

const PROVIDER_KEY = 'sk-provider-secret-0123456789abcdef';
const ANTHROPIC_KEY = 'sk-ant-provider-secret-0123456789';
const completion = completionTokensFor(DEFAULT_REPLY);
const chat = {
  model: 'gpt-4o-mini',
  messages: [{ role: 'user' as const, content: 'A secret prompt about the quarterly numbers.' }],
};
const message = {
  model: 'claude-test-1',
  max_tokens: 64,
  messages: [{ role: 'user' as const, content: 'Say hello to the proxy.' }],
};

let api: ProxyTestApi;
const log = captureLog('debug');

beforeAll(async () => {
  api = await startProxyTestApi('postgres+redis', { upstream: { cachedTokens: 2 }, logger: log.logger });
  const prices = { input_cost_per_token: 0.000001, output_cost_per_token: 0.000004 };
  for (const model of ['gpt-4o-mini', 'claude-test-1']) {
    expect((await api.request('PUT', `/v1/model-pricing/${model}`, prices)).status).toBe(200);
  }
});
afterAll(async () => {
  await api?.close();
});

async function startRun(caller: Caller = api, userId = 'agent-1'): Promise<string> {
  const res = await caller.request('POST', '/v1/runs', { user_id: userId });
  expect(res.body.status).toBe('RUNNING');
  return res.body.id;
}

/** The proxy records after the answer is delivered: wait until no step is left ALLOWED. */
async function settledRun(runId: string, caller: Caller = api, steps = 1): Promise<any> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const run = (await caller.request('GET', `/v1/runs/${runId}`)).body;
    // GET /v1/runs/{id} reads the run and its steps in two parallel queries: a step can read
    // committed before its run's totals do. Settled means both agree.
    const counted = run.steps.reduce((n: number, s: any) => n + (s.prompt_tokens ?? 0) + (s.completion_tokens ?? 0), 0);
    if (
      run.steps.length >= steps &&
      run.steps.every((s: any) => s.status !== 'ALLOWED') &&
      run.total_tokens === counted
    )
      return run;
    if (Date.now() > deadline) throw new Error(`run ${runId} did not settle: ${JSON.stringify(run.steps)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function openaiFor(runId: string, key = api.apiKey): OpenAI {
  return new OpenAI({
    baseURL: `${api.url}/proxy/runs/${runId}/openai/v1`,
    apiKey: PROVIDER_KEY,
    maxRetries: 0,
    defaultHeaders: { 'x-runguard-key': key },
  });
}

function rawPost(url: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const { host, port } = new URL(url);
    const path = url.slice(url.indexOf('/', 'http://'.length));
    const req = httpRequest(
      {
        host: host.split(':')[0],
        port,
        path,
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
      },
      (res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end('{}');
  });
}

/** Token counts and cost of one call at the prices set above. */
const cost = (prompt: number, completionTokens: number) =>
  Number((prompt * 0.000001 + completionTokens * 0.000004).toFixed(12));

/** The run's one step, once settled: completed, with `chat`'s token counts and their cost. */
async function expectPricedChat(runId: string, more: Record<string, unknown> = {}) {
  const run = await settledRun(runId);
  expect(run.steps[0]).toMatchObject({
    status: 'COMPLETED',
    prompt_tokens: promptTokensFor(chat),
    completion_tokens: completion,
    ...more,
  });
  expect(run.steps[0].cost_usd).toBe(cost(promptTokensFor(chat), completion));
}

describe('proxy with the OpenAI SDK', () => {
  it('when a chat completion goes through a run URL, then it is forwarded clean and recorded with tokens and cost', async () => {
    const runId = await startRun();
    const before = api.upstream.requests.length;
    const { data, response } = await openaiFor(runId).chat.completions.create(chat).withResponse();
    expect(data.choices[0]?.message.content).toBe(DEFAULT_REPLY);
    const stepId = response.headers.get('x-runguard-step-id');
    expect(stepId).toMatch(/^[0-9a-f-]{36}$/);
    // The provider's request id reaches its SDK (support asks for it); the daemon's has a name of its own.
    expect(data._request_id).toMatch(/^req_fake\d+$/);
    expect(response.headers.get('x-runguard-request-id')).toMatch(/^[0-9a-f-]{36}$/);

    expect(api.upstream.requests.length).toBe(before + 1);
    const sent = api.upstream.requests.at(-1)!;
    expect(sent).toMatchObject({ method: 'POST', path: '/v1/chat/completions', body: chat });
    expect(sent.headers.authorization).toBe(`Bearer ${PROVIDER_KEY}`);
    expect(sent.headers['accept-encoding']).toBe('identity');
    expect(Object.keys(sent.headers).filter((h) => h.startsWith('x-runguard'))).toEqual([]);
    expect(sent.rawBody).not.toContain(api.apiKey);

    const run = await settledRun(runId);
    const prompt = promptTokensFor(chat);
    expect(run.steps).toHaveLength(1);
    expect(run.steps[0]).toMatchObject({
      id: stepId,
      sequence: 1,
      type: 'MODEL_CALL',
      status: 'COMPLETED',
      model: 'gpt-4o-mini',
      prompt_tokens: prompt,
      completion_tokens: completion,
      cached_prompt_tokens: 2,
      cost_usd: cost(prompt, completion),
      output_data: { http_status: 200, upstream_request_id: expect.stringMatching(/^req_fake/) },
    });
    expect(run.steps[0].duration_ms).toBeGreaterThanOrEqual(0);
    expect(run.steps[0].input_data).toEqual({
      provider: 'openai',
      method: 'POST',
      path: '/v1/chat/completions',
      model: 'gpt-4o-mini',
      stream: false,
      body_bytes: Buffer.byteLength(sent.rawBody),
      messages: 1,
    });
    expect(run).toMatchObject({
      status: 'RUNNING',
      total_tokens: prompt + completion,
      total_cost_usd: cost(prompt, completion),
    });
  });

  it("when a call goes through, then its answer says the sidecar's overhead and the metrics time both sides", async () => {
    const runId = await startRun();
    const { response } = await openaiFor(runId).chat.completions.create(chat).withResponse();
    const overhead = Number(response.headers.get('x-runguard-overhead-ms'));
    expect(response.headers.get('x-runguard-overhead-ms')).toMatch(/^\d+\.\d{2}$/);
    expect(overhead).toBeGreaterThanOrEqual(0);
    await settledRun(runId);
    const samples = parseMetrics((await api.request('GET', '/metrics')).body as string);
    expect(
      metricValue(samples, 'runguard_proxy_overhead_seconds_count', { provider: 'openai' }),
    ).toBeGreaterThanOrEqual(1);
    expect(
      metricValue(samples, 'runguard_proxy_upstream_duration_seconds_count', { provider: 'openai', outcome: 'ok' }),
    ).toBeGreaterThanOrEqual(1);
  });

  it('when a chat completion streams with delays, then chunks arrive one by one and usage is recorded', async () => {
    const runId = await startRun();
    const stream = await openaiFor(runId).chat.completions.create(
      { ...chat, stream: true },
      { headers: { 'x-fake-chunk-delay-ms': '200' } },
    );
    const t0 = Date.now();
    const arrivals: number[] = [];
    let text = '';
    for await (const chunk of stream) {
      arrivals.push(Date.now() - t0);
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    expect(text).toBe(DEFAULT_REPLY);
    // Not buffered: the first chunk is here long before the last (8 more chunks, 200 ms apart).
    expect(arrivals.length).toBeGreaterThan(5);
    expect(arrivals.at(-1)! - arrivals[0]!).toBeGreaterThan(1_000);
    // The client did not ask for usage; the proxy asked upstream for it (include_usage).
    expect(api.upstream.requests.at(-1)!.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    await expectPricedChat(runId, { input_data: { stream: true, usage_requested: true } });
  });

  it('when a streamed chat says include_usage: false, then usage is asked for anyway and the call is priced', async () => {
    const runId = await startRun();
    const stream = await openaiFor(runId).chat.completions.create({
      ...chat,
      stream: true,
      stream_options: { include_usage: false },
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    expect(text).toBe(DEFAULT_REPLY);
    expect(api.upstream.requests.at(-1)!.body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    await expectPricedChat(runId);
  });

  it('when the request body is compressed, then 415 in the provider format: its model could not be read, so it is not forwarded', async () => {
    const runId = await startRun();
    const before = api.upstream.requests.length;
    const res = await fetch(`${api.url}/proxy/runs/${runId}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'content-encoding': 'gzip',
        'x-runguard-key': api.apiKey,
        authorization: `Bearer ${PROVIDER_KEY}`,
      },
      body: gzipSync(JSON.stringify(chat)),
    });
    expect(res.status).toBe(415);
    expect(await res.json()).toEqual({
      error: expect.objectContaining({ code: 'UNSUPPORTED_CONTENT_ENCODING', type: 'invalid_request_error' }),
    });
    expect(api.upstream.requests.length).toBe(before);
    expect((await api.request('GET', `/v1/runs/${runId}`)).body.steps).toEqual([]);
  });

  it('when the upstream answers 429 or 500, then the SDK sees that error and the step is FAILED', async () => {
    const runId = await startRun();
    const client = openaiFor(runId);
    const rate = await client.chat.completions
      .create(chat, { headers: { 'x-fake-status': '429' } })
      .catch((e: unknown) => e);
    expect(rate).toBeInstanceOf(OpenAI.RateLimitError);
    expect(rate).toMatchObject({ status: 429, code: 'fake_429' });
    const down = await client.chat.completions
      .create(chat, { headers: { 'x-fake-status': '500' } })
      .catch((e: unknown) => e);
    expect(down).toBeInstanceOf(OpenAI.InternalServerError);
    const run = await settledRun(runId, api, 2);
    expect(run.steps.map((s: any) => [s.sequence, s.status, s.output_data.http_status])).toEqual([
      [1, 'FAILED', 429],
      [2, 'FAILED', 500],
    ]);
    expect(run.steps[0].cost_usd).toBeNull();
  });

  it('when the run URL spells the run id in uppercase, then the calls land in that run and their cost counts at the next decision', async () => {
    const ws = await api.newWorkspace();
    await ws.api.request('PUT', `/v1/model-pricing/${chat.model}`, {
      input_cost_per_token: 0.000001,
      output_cost_per_token: 0.000004,
    });
    // A budget of exactly three calls: the fourth must be denied.
    const prompt = promptTokensFor(chat);
    await api.setWorkspace({ daily_budget_micros: Math.round(cost(3 * prompt, 3 * completion) * 1e6) }, ws.workspaceId);
    const runId = await startRun(ws.api);
    // A first call as the id was given, so that the day's counters exist before the others.
    await openaiFor(runId, ws.apiKey).chat.completions.create(chat);
    await settledRun(runId, ws.api, 1);
    const client = openaiFor(runId.toUpperCase(), ws.apiKey);
    for (let i = 0; i < 2; i++) await client.chat.completions.create(chat);
    const run = await settledRun(runId, ws.api, 3);
    expect(run.steps.map((s: any) => [s.sequence, s.status])).toEqual([
      [1, 'COMPLETED'],
      [2, 'COMPLETED'],
      [3, 'COMPLETED'],
    ]);
    await expect(client.chat.completions.create(chat)).rejects.toMatchObject({ status: 403 });
    expect((await ws.api.request('GET', `/v1/runs/${runId}`)).body.steps.at(-1)).toMatchObject({
      status: 'BLOCKED',
      decision: { reason: 'WORKSPACE_DAILY_BUDGET_EXCEEDED' },
    });
  });

  it('when 20 calls run in parallel in one run, then each is one step with sequences 1..20', async () => {
    const runId = await startRun();
    const client = openaiFor(runId);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        client.chat.completions.create({ ...chat, messages: [{ role: 'user', content: `call ${i}` }] }),
      ),
    );
    expect(results).toHaveLength(20);
    const run = await settledRun(runId, api, 20);
    expect(run.step_count).toBe(20);
    expect(run.steps.map((s: any) => s.sequence)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(new Set(run.steps.map((s: any) => s.id)).size).toBe(20);
    expect(run.steps.every((s: any) => s.status === 'COMPLETED' && s.completion_tokens === completion)).toBe(true);
  });

  it('when the kill switch is on, then the SDK raises PermissionDeniedError and nothing goes upstream', async () => {
    const ws = await api.newWorkspace();
    const runId = await startRun(ws.api);
    await api.setWorkspace({ kill_switch_active: true }, ws.workspaceId);
    const before = api.upstream.requests.length;
    const error = await openaiFor(runId, ws.apiKey)
      .chat.completions.create(chat)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(error).toMatchObject({ status: 403, code: 'KILL_SWITCH_ACTIVE', type: 'guardrail_denied' });
    expect((error as OpenAI.APIError).headers?.get('x-should-retry')).toBe('false');
    expect(api.upstream.requests.length).toBe(before);
    const run = (await ws.api.request('GET', `/v1/runs/${runId}`)).body;
    expect(run.steps).toHaveLength(1);
    expect(run.steps[0]).toMatchObject({
      status: 'BLOCKED',
      decision: { outcome: 'DENY', reason: 'KILL_SWITCH_ACTIVE' },
    });
  });

  it('when a call names no run, then a run of its own is started and ended around it', async () => {
    const client = new OpenAI({
      baseURL: `${api.url}/proxy/openai/v1`,
      apiKey: PROVIDER_KEY,
      maxRetries: 0,
      defaultHeaders: { 'x-runguard-key': api.apiKey, 'x-runguard-user-id': 'solo-user' },
    });
    const { response } = await client.chat.completions.create(chat).withResponse();
    expect(response.status).toBe(200);
    const deadline = Date.now() + 10_000;
    let run: any;
    do {
      const list = (await api.request('GET', '/v1/runs?user_id=solo-user')).body;
      run = list.items[0] && (await api.request('GET', `/v1/runs/${list.items[0].id}`)).body;
      if (run?.status === 'COMPLETED') break;
      await new Promise((r) => setTimeout(r, 20));
    } while (Date.now() < deadline);
    expect(run).toMatchObject({ status: 'COMPLETED', metadata: { proxy: 'openai' }, step_count: 1 });
    expect(run.steps[0]).toMatchObject({ status: 'COMPLETED', completion_tokens: completion });
  });

  it('when the user of a run-less call is blocked, then the run is BLOCKED and the SDK gets a permission error', async () => {
    await api.stores.db.query('INSERT INTO sdk_users (workspace_id, user_id, blocked) VALUES ($1, $2, true)', [
      api.workspaceId,
      'banned',
    ]);
    const before = api.upstream.requests.length;
    const client = new OpenAI({
      baseURL: `${api.url}/proxy/openai/v1`,
      apiKey: PROVIDER_KEY,
      maxRetries: 0,
      defaultHeaders: { 'x-runguard-key': api.apiKey, 'x-runguard-user-id': 'banned' },
    });
    const error = await client.chat.completions.create(chat).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(error).toMatchObject({ code: 'USER_BLOCKED' });
    expect(api.upstream.requests.length).toBe(before);
    const runs = (await api.request('GET', '/v1/runs?user_id=banned')).body;
    expect(runs.items.map((r: any) => r.status)).toEqual(['BLOCKED']);
  });

  it('when the guardrail key is missing, wrong, or the run is over, then the SDK gets a non-retried client error', async () => {
    const runId = await startRun();
    const noKey = new OpenAI({
      baseURL: `${api.url}/proxy/runs/${runId}/openai/v1`,
      apiKey: PROVIDER_KEY,
      maxRetries: 0,
    });
    expect(await noKey.chat.completions.create(chat).catch((e: unknown) => e)).toBeInstanceOf(
      OpenAI.AuthenticationError,
    );
    const badKey = openaiFor(runId, 'lg_aaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb');
    expect(await badKey.chat.completions.create(chat).catch((e: unknown) => e)).toBeInstanceOf(
      OpenAI.AuthenticationError,
    );
    const other = await api.newWorkspace();
    const foreign = await openaiFor(runId, other.apiKey)
      .chat.completions.create(chat)
      .catch((e: unknown) => e);
    expect(foreign).toBeInstanceOf(OpenAI.NotFoundError);
    await api.request('POST', `/v1/runs/${runId}/end`, { status: 'COMPLETED' });
    const ended = await openaiFor(runId)
      .chat.completions.create(chat)
      .catch((e: unknown) => e);
    expect(ended).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(ended).toMatchObject({ code: 'RUN_NOT_RUNNING' });
  });

  it('when a path tries to climb out of the upstream base, then 400 and nothing is sent', async () => {
    const runId = await startRun();
    const before = api.upstream.requests.length;
    // fetch would normalise the dot segments away: send the path as written.
    const { status, body } = await rawPost(`${api.url}/proxy/runs/${runId}/openai/v1/%2e%2e/admin`, {
      'x-runguard-key': api.apiKey,
    });
    expect(status).toBe(400);
    expect(JSON.parse(body)).toMatchObject({ error: { code: 'BAD_PATH' } });
    expect(api.upstream.requests.length).toBe(before);
  });
});

describe('proxy with the Anthropic SDK through a run token', () => {
  async function tokenClient(runId: string) {
    const minted = await api.request('POST', `/v1/runs/${runId}/proxy-token`);
    expect(minted.status).toBe(201);
    expect(minted.body).toMatchObject({
      token: expect.stringMatching(/^rgp_/),
      expires_at: null,
      urls: {
        openai: `${api.url}/proxy/t/${minted.body.token}/openai/v1`,
        anthropic: `${api.url}/proxy/t/${minted.body.token}/anthropic`,
      },
    });
    return {
      token: minted.body.token as string,
      client: new Anthropic({ baseURL: minted.body.urls.anthropic, apiKey: ANTHROPIC_KEY, maxRetries: 0 }),
    };
  }

  it('when a message is created and streamed, then both are recorded with cache reads and cost', async () => {
    const runId = await startRun();
    const { client } = await tokenClient(runId);
    const result = await client.messages.create(message);
    expect(result.content[0]).toMatchObject({ type: 'text', text: DEFAULT_REPLY });
    const sent = api.upstream.requests.at(-1)!;
    expect(sent.path).toBe('/v1/messages');
    // This SDK version sends its key as a bearer token; either way it arrives untouched.
    expect(sent.headers['x-api-key'] ?? sent.headers.authorization).toMatch(new RegExp(`^(Bearer )?${ANTHROPIC_KEY}$`));
    expect(Object.keys(sent.headers).filter((h) => h.startsWith('x-runguard'))).toEqual([]);

    const stream = client.messages.stream(message, { headers: { 'x-fake-chunk-delay-ms': '20' } });
    const final = await stream.finalMessage();
    expect(final.usage.output_tokens).toBe(completion);

    const run = await settledRun(runId, api, 2);
    const prompt = promptTokensFor(message);
    for (const step of run.steps) {
      expect(step).toMatchObject({
        status: 'COMPLETED',
        model: 'claude-test-1',
        prompt_tokens: prompt,
        completion_tokens: completion,
        cached_prompt_tokens: 2,
        cost_usd: cost(prompt, completion),
        input_data: { provider: 'anthropic', max_tokens: 64 },
      });
    }
    expect(run.steps.map((s: any) => s.input_data.stream)).toEqual([false, true]);
  });

  it('when the client aborts mid-stream, then the step is FAILED with the tokens seen so far', async () => {
    const runId = await startRun();
    const { client } = await tokenClient(runId);
    const stream = client.messages.stream(message, { headers: { 'x-fake-chunk-delay-ms': '150' } });
    let events = 0;
    const done = (async () => {
      for await (const event of stream) {
        void event;
        // Break too: events queued before the abort would still be yielded after it.
        if (++events === 3) {
          stream.abort();
          break;
        }
      }
    })().catch((e: unknown) => e);
    await done;
    expect(events).toBe(3);
    const run = await settledRun(runId);
    // message_start carried the input tokens and a first output count; the final delta never came.
    expect(run.steps[0]).toMatchObject({
      status: 'FAILED',
      prompt_tokens: promptTokensFor(message),
      completion_tokens: 1,
      output_data: { http_status: 200, error: 'CLIENT_ABORTED' },
    });
  });

  it('when the upstream breaks mid-stream, then the step is FAILED as UPSTREAM_BROKEN', async () => {
    const runId = await startRun();
    const { client } = await tokenClient(runId);
    const error = await client.messages
      .stream(message, { headers: { 'x-fake-abort-after-events': '3' } })
      .finalMessage()
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    const run = await settledRun(runId);
    expect(run.steps[0]).toMatchObject({
      status: 'FAILED',
      prompt_tokens: promptTokensFor(message),
      output_data: { error: 'UPSTREAM_BROKEN' },
    });
  });

  it('when the user is blocked, then the SDK raises PermissionDeniedError in Anthropic format', async () => {
    const ws = await api.newWorkspace();
    const runId = await startRun(ws.api, 'to-block');
    const minted = (await ws.api.request('POST', `/v1/runs/${runId}/proxy-token`)).body;
    await ws.api.request('PUT', '/v1/users/to-block', { blocked: true }).catch(() => undefined);
    await api.stores.db.query(
      `INSERT INTO sdk_users (workspace_id, user_id, blocked) VALUES ($1, 'to-block', true)
       ON CONFLICT (workspace_id, user_id) DO UPDATE SET blocked = true`,
      [ws.workspaceId],
    );
    const before = api.upstream.requests.length;
    const client = new Anthropic({ baseURL: minted.urls.anthropic, apiKey: ANTHROPIC_KEY, maxRetries: 0 });
    const error = await client.messages.create(message).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect((error as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({
      type: 'error',
      error: { type: 'permission_error', details: { error_code: 'USER_BLOCKED' } },
    });
    expect(api.upstream.requests.length).toBe(before);
  });

  it('when the run has ended or the token is unknown, then the token no longer works (401)', async () => {
    const runId = await startRun();
    const { client, token } = await tokenClient(runId);
    await api.request('POST', `/v1/runs/${runId}/end`, { status: 'COMPLETED' });
    expect(await client.messages.create(message).catch((e: unknown) => e)).toBeInstanceOf(
      Anthropic.AuthenticationError,
    );
    const forged = new Anthropic({
      baseURL: `${api.url}/proxy/t/rgp_${'A'.repeat(43)}/anthropic`,
      apiKey: ANTHROPIC_KEY,
      maxRetries: 0,
    });
    expect(await forged.messages.create(message).catch((e: unknown) => e)).toBeInstanceOf(
      Anthropic.AuthenticationError,
    );
    const late = await api.request('POST', `/v1/runs/${runId}/proxy-token`);
    expect(late.status).toBe(409);
    const { rows } = await api.stores.db.query<{ token_sha256: Buffer }>('SELECT token_sha256 FROM proxy_tokens');
    expect(rows.length).toBeGreaterThan(0);
    expect(JSON.stringify(rows)).not.toContain(token);
  });
});

describe('header hygiene', () => {
  it('when calls have gone through, then no provider key, guardrail key or proxy token is in the logs or records', async () => {
    const runId = await startRun();
    const minted = (await api.request('POST', `/v1/runs/${runId}/proxy-token`)).body;
    const client = new OpenAI({ baseURL: minted.urls.openai, apiKey: PROVIDER_KEY, maxRetries: 0 });
    await client.chat.completions.create(chat);
    await settledRun(runId);
    // The logger saw the traffic (so the check below means something) ...
    const logs = log.lines.join('');
    expect(logs).toContain('/proxy/t/[redacted]/openai/v1/chat/completions');
    // ... and none of the secrets.
    for (const secret of [PROVIDER_KEY, ANTHROPIC_KEY, minted.token, api.apiKey, 'quarterly numbers']) {
      expect(logs).not.toContain(secret);
    }
    for (const table of ['steps', 'runs', 'proxy_tokens', 'idempotency_keys']) {
      const { rows } = await api.stores.db.query(`SELECT * FROM ${table}`);
      const text = JSON.stringify(rows);
      for (const secret of [PROVIDER_KEY, ANTHROPIC_KEY, minted.token, api.apiKey, 'quarterly numbers']) {
        expect(text).not.toContain(secret);
      }
    }
    // Every upstream request so far: no guardrail header, no guardrail key anywhere in the headers.
    for (const request of api.upstream.requests) {
      expect(Object.keys(request.headers).filter((h) => h.startsWith('x-runguard'))).toEqual([]);
      expect(JSON.stringify(request.headers)).not.toContain('lg_');
    }
  });
});

describe('proxy on the embedded store, with the daemon key as default', () => {
  let local: TestApi;
  beforeAll(async () => {
    local = await startTestApi('embedded', {
      proxy: {
        upstream: api.upstream.url,
        workspaceKeyAsDefault: true,
        bodyLimitBytes: 4_096,
        audit: { maxBytes: 400, includePrompt: true },
        providers: [
          { name: 'local', type: 'openai', upstream: `${api.upstream.url}/v1` },
          { name: 'dead', type: 'openai', upstream: 'http://127.0.0.1:9' },
        ],
      },
    });
  });
  afterAll(() => local?.close());

  it('when a loopback call carries no guardrail key, then the daemon key guards it and the body crosses byte for byte', async () => {
    const runId = await startRun(local);
    const body = '{ "model": "gpt-4o-mini",\n  "messages": [{"role": "user", "content": "exact bytes"}] }';
    const res = await fetch(`${local.url}/proxy/runs/${runId}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${PROVIDER_KEY}` },
      body,
    });
    expect(res.status).toBe(200);
    expect(api.upstream.requests.at(-1)!.rawBody).toBe(body);
    const run = await settledRun(runId, local);
    expect(run.steps[0]).toMatchObject({ status: 'COMPLETED', input_data: { prompt_excerpt: 'exact bytes' } });
    expect(Buffer.byteLength(JSON.stringify(run.steps[0].input_data))).toBeLessThanOrEqual(400);
  });

  it('when the excerpt or the model name would end inside an emoji, then the call goes and its summary is whole characters', async () => {
    const runId = await startRun(local);
    const client = new OpenAI({
      baseURL: `${local.url}/proxy/runs/${runId}/openai/v1`,
      apiKey: PROVIDER_KEY,
      maxRetries: 0,
    });
    // Cut at an odd and at an even place, and a lone surrogate of the client's own (JSON allows "\ud800").
    const prompts = ['x' + '😀'.repeat(300), '😀'.repeat(300), 'lone \ud800 surrogate'];
    for (const content of prompts)
      await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content }] });
    await client.chat.completions.create({
      model: 'm'.repeat(127) + '😀',
      messages: [{ role: 'user', content: 'hi' }],
    });
    const run = await settledRun(runId, local, 4);
    expect(run.steps.map((s: { status: string }) => s.status)).toEqual([
      'COMPLETED',
      'COMPLETED',
      'COMPLETED',
      'COMPLETED',
    ]);
    for (const step of run.steps) expect(JSON.stringify(step.input_data).isWellFormed()).toBe(true);
    expect(run.steps[0].input_data.prompt_excerpt).toMatch(/^x(😀)+…?$/u);
    expect(run.steps[2].input_data.prompt_excerpt).toBe('lone \ufffd surrogate');
    expect(run.steps[3].input_data.model).toBe(`${'m'.repeat(127)}…`);
  });

  it('when a configured provider has a base path, then its SDK URL has no /v1 and calls reach that path', async () => {
    const runId = await startRun(local);
    const minted = (await local.request('POST', `/v1/runs/${runId}/proxy-token`)).body;
    expect(minted.urls.local).toBe(`${local.url}/proxy/t/${minted.token}/local`);
    const client = new OpenAI({ baseURL: minted.urls.local, apiKey: PROVIDER_KEY, maxRetries: 0 });
    await client.chat.completions.create(chat);
    expect(api.upstream.requests.at(-1)!.path).toBe('/v1/chat/completions');
  });

  it('when the upstream cannot be reached, then the SDK gets a 502 in its format and the step is FAILED', async () => {
    const runId = await startRun(local);
    const client = new OpenAI({
      baseURL: `${local.url}/proxy/runs/${runId}/dead/v1`,
      apiKey: PROVIDER_KEY,
      maxRetries: 0,
    });
    const error = await client.chat.completions.create(chat).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.InternalServerError);
    expect(error).toMatchObject({ status: 502, code: 'UPSTREAM_UNAVAILABLE' });
    const run = await settledRun(runId, local);
    expect(run.steps[0]).toMatchObject({
      status: 'FAILED',
      output_data: { http_status: 502, error: 'UPSTREAM_UNAVAILABLE' },
    });
  });

  it('when the body is over the proxy limit or the provider is unknown, then 413 in the provider format or 404', async () => {
    const runId = await startRun(local);
    const client = new OpenAI({
      baseURL: `${local.url}/proxy/runs/${runId}/openai/v1`,
      apiKey: PROVIDER_KEY,
      maxRetries: 0,
    });
    const big = await client.chat.completions
      .create({ ...chat, messages: [{ role: 'user', content: 'x'.repeat(5_000) }] })
      .catch((e: unknown) => e);
    expect(big).toMatchObject({ status: 413, code: 'PAYLOAD_TOO_LARGE' });
    const unknown = await fetch(`${local.url}/proxy/runs/${runId}/nope/v1/chat/completions`, { method: 'POST' });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toMatchObject({ code: 'NOT_FOUND' });
  });
});

describe('a 200 stream that carries an error event', () => {
  let failing: Server;
  let local: TestApi;
  beforeAll(async () => {
    // An upstream that starts a message, then fails it inside the stream, as Anthropic does when overloaded.
    failing = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(
          `event: message_start\ndata: ${JSON.stringify({
            type: 'message_start',
            message: {
              id: 'msg_1',
              type: 'message',
              role: 'assistant',
              content: [],
              model: 'claude-test-1',
              stop_reason: null,
              stop_sequence: null,
              usage: { input_tokens: 11, output_tokens: 1 },
            },
          })}\n\n`,
        );
        res.end(
          `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } })}\n\n`,
        );
      });
    });
    await new Promise<void>((resolve) => failing.listen(0, '127.0.0.1', resolve));
    local = await startTestApi('postgres+redis', {
      proxy: { upstream: `http://127.0.0.1:${(failing.address() as AddressInfo).port}` },
    });
  });
  afterAll(async () => {
    await local?.close();
    await new Promise((resolve) => failing?.close(resolve));
  });

  it('when the stream fails inside a 200, then the SDK raises and the step is FAILED with the tokens read', async () => {
    const runId = await startRun(local);
    const client = new Anthropic({
      baseURL: `${local.url}/proxy/runs/${runId}/anthropic`,
      apiKey: ANTHROPIC_KEY,
      maxRetries: 0,
      defaultHeaders: { 'x-runguard-key': local.apiKey },
    });
    const stream = await client.messages.create({ ...message, stream: true });
    const error = await (async () => {
      for await (const event of stream) void event;
    })().catch((e: unknown) => e);
    expect(error).toMatchObject({ error: { type: 'error', error: { type: 'overloaded_error' } } });
    const run = await settledRun(runId, local);
    expect(run.steps[0]).toMatchObject({
      status: 'FAILED',
      prompt_tokens: 11,
      output_data: { http_status: 200, error: 'UPSTREAM_STREAM_ERROR' },
    });
  });
});
