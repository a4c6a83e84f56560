/**
 * The client SDK against the real daemon: the real app on a real socket, real Postgres and Redis
 * (and the embedded database), no stand-in server. What the SDK promises is checked in what the
 * daemon stored (GET /v1/runs/{id}), not in what the SDK says it sent.
 */
import { runCounts } from '../../src/store/counters/counters.js';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  ConflictError,
  extractors,
  type Decision,
  GuardBlockedError,
  GuardClient,
  NoActiveRunError,
  type Run,
  type RunHandle,
  type RunSummary,
} from '../../clients/typescript/src/index.js';
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.js';
import { startTestApi, type Backend, type Caller, type TestApi } from '../support/harness.js';
import { startHttpRelay, type HttpRelay } from '../support/http-relay.js';
import { openaiChatCompletion } from './openai-shapes.js';

const RUN_START = /^\/v1\/runs\/?$/;
const STEP_CREATE = /^\/v1\/runs\/[^/]+\/steps$/;
const STEP_UPDATE = /^\/v1\/runs\/[^/]+\/steps\/[^/]+$/;
const RUN_END = /^\/v1\/runs\/[^/]+\/end$/;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const chatCompletion = (prompt: number, completion: number) => openaiChatCompletion('Paris.', prompt, completion);

interface Workspace {
  api: Caller;
  workspaceId: string;
  apiKey: string;
}

/** `full`: also the SDK-side behaviours that do not depend on the store. */
const BEHAVIOUR_BACKENDS: { backend: Backend; full: boolean }[] = [
  { backend: 'postgres+redis', full: true },
  { backend: 'embedded', full: false },
];

describe.each(BEHAVIOUR_BACKENDS)('GuardClient against the real daemon ($backend)', ({ backend, full }) => {
  let daemon: TestApi;
  const clients: GuardClient[] = [];

  beforeAll(async () => {
    daemon = await startTestApi(backend);
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.close()));
  });
  afterAll(async () => {
    await daemon?.close();
  });

  /** A workspace of its own per test: a kill switch or a blocked user never leaks into another test. */
  const freshWorkspace = async (): Promise<Workspace & { guard: GuardClient }> => {
    const ws = await daemon.newWorkspace();
    const guard = new GuardClient({ apiKey: ws.apiKey, baseUrl: daemon.url });
    clients.push(guard);
    return { ...ws, guard };
  };
  const detailOf = async (ws: Workspace, runId: string): Promise<Run> => {
    const res = await ws.api.request<Run>('GET', `/v1/runs/${runId}`);
    expect(res.status).toBe(200);
    return res.body;
  };
  const runsOf = async (ws: Workspace, userId: string): Promise<RunSummary[]> => {
    const res = await ws.api.request<{ items: RunSummary[]; total: number }>(
      'GET',
      `/v1/runs?user_id=${encodeURIComponent(userId)}`,
    );
    expect(res.status).toBe(200);
    return res.body.items;
  };
  const blockUser = (ws: Workspace, userId: string) =>
    daemon.stores.db.query(
      `INSERT INTO sdk_users (workspace_id, user_id, blocked) VALUES ($1, $2, true)
       ON CONFLICT (workspace_id, user_id) DO UPDATE SET blocked = true`,
      [ws.workspaceId, userId],
    );

  it('when fn resolves, then the run is COMPLETED with its steps, their tokens and their cost', async () => {
    const ws = await freshWorkspace();
    const price = await ws.api.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
      input_cost_per_token: 1.5e-7,
      output_cost_per_token: 6e-7,
    });
    expect(price.status).toBe(200);
    let runId = '';
    let decision: Decision | undefined;

    const answer = await ws.guard.run(
      'alice',
      async (run) => {
        runId = run.id;
        decision = run.decision;
        const reply = await run.modelCall(async () => chatCompletion(1234, 567), {
          model: 'gpt-4o-mini',
          inputData: { prompt: 'Capital of France?' },
          tokenExtractor: extractors.openai,
        });
        return run.toolCall(async () => ({ hits: [reply.choices[0]!.message.content] }), {
          toolName: 'search',
          inputData: { q: 'Paris' },
        });
      },
      { metadata: { ticket: 42 } },
    );

    expect(answer).toEqual({ hits: ['Paris.'] });
    // The handle carries the daemon's decision as it was sent: all six rules evaluated at run start.
    expect(decision).toEqual({
      outcome: 'ALLOW',
      reason: null,
      evaluated_rules: {
        kill_switch: 'PASS',
        user_blocked: 'PASS',
        workspace_daily_budget: 'PASS',
        user_daily_budget: 'PASS',
        monthly_run_limit: 'PASS',
        max_concurrent_runs: 'PASS',
      },
    });
    const run = await detailOf(ws, runId);
    expect(run).toMatchObject({
      id: runId,
      user_id: 'alice',
      status: 'COMPLETED',
      metadata: { ticket: 42 },
      ended_at: expect.stringMatching(/Z$/),
      total_tokens: 1801,
    });
    // 1234 x 0.00000015 + 567 x 0.0000006 = 0.0005253; the tool call has no cost.
    expect(run.total_cost_usd).toBe(0.0005253);
    expect(run.steps).toHaveLength(2);
    expect(run.steps[0]).toMatchObject({
      sequence: 1,
      type: 'MODEL_CALL',
      status: 'COMPLETED',
      model: 'gpt-4o-mini',
      tool_name: null,
      prompt_tokens: 1234,
      completion_tokens: 567,
      cost_usd: 0.0005253,
      input_data: { prompt: 'Capital of France?' },
      decision: { outcome: 'ALLOW', reason: null },
    });
    expect(run.steps[1]).toMatchObject({
      sequence: 2,
      type: 'TOOL_CALL',
      status: 'COMPLETED',
      model: null,
      tool_name: 'search',
      prompt_tokens: null,
      completion_tokens: null,
      cost_usd: null,
      input_data: { q: 'Paris' },
    });
    for (const step of run.steps) expect(step.duration_ms).toEqual(expect.any(Number));
  });

  it('when fn throws, then the run is FAILED and the same error object reaches the caller', async () => {
    const ws = await freshWorkspace();
    const boom = new Error('the agent crashed');
    let runId = '';
    const caught = await ws.guard
      .run('bob', async (run) => {
        runId = run.id;
        await run.toolCall(() => 'fine', { toolName: 'first' });
        throw boom;
      })
      .catch((error: unknown) => error);

    expect(caught).toBe(boom);
    const run = await detailOf(ws, runId);
    expect(run.status).toBe('FAILED');
    expect(run.ended_at).not.toBeNull();
    expect(run.steps.map((s) => [s.sequence, s.status])).toEqual([[1, 'COMPLETED']]);
  });

  it('when a step fn throws, then the step is FAILED, the run is FAILED, and the error is the same object', async () => {
    const ws = await freshWorkspace();
    const upstreamDown = new TypeError('fetch failed');
    let runId = '';
    const caught = await ws.guard
      .run('bob', async (run) => {
        runId = run.id;
        return run.modelCall(
          async () => {
            throw upstreamDown;
          },
          { model: 'gpt-4o-mini', tokenExtractor: extractors.openai },
        );
      })
      .catch((error: unknown) => error);

    expect(caught).toBe(upstreamDown);
    const run = await detailOf(ws, runId);
    expect(run.status).toBe('FAILED');
    expect(run.steps[0]).toMatchObject({
      status: 'FAILED',
      prompt_tokens: null,
      completion_tokens: null,
      cost_usd: null,
    });
  });

  it('when the user is blocked, then the start throws GuardBlockedError USER_BLOCKED, fn never runs, and a BLOCKED run is stored', async () => {
    const ws = await freshWorkspace();
    await blockUser(ws, 'mallory');
    let called = false;

    const caught = await ws.guard
      .run('mallory', () => {
        called = true;
      })
      .catch((error: unknown) => error);

    expect(caught).toBeInstanceOf(GuardBlockedError);
    const blocked = caught as GuardBlockedError;
    expect(blocked.denyReason).toBe('USER_BLOCKED');
    expect(blocked.userId).toBe('mallory');
    expect(blocked.reason).toMatch(/USER_BLOCKED/);
    expect(called).toBe(false);
    const listed = await runsOf(ws, 'mallory');
    expect(listed.map((r) => [r.id, r.status])).toEqual([[blocked.runId, 'BLOCKED']]);
    const run = await detailOf(ws, blocked.runId!);
    expect(run).toMatchObject({ status: 'BLOCKED', steps: [], duration_ms: 0 });
    // Other users of the workspace are not affected.
    await expect(ws.guard.run('alice', () => 'ok')).resolves.toBe('ok');
  });

  it('when the kill switch is turned on mid-run, then the next step throws before fn runs and is stored BLOCKED', async () => {
    const ws = await freshWorkspace();
    let executed = 0;
    let runId = '';

    const caught = await ws.guard
      .run('carol', async (run) => {
        runId = run.id;
        await run.toolCall(() => executed++, { toolName: 'before' });
        const toggled = await ws.api.request('POST', '/v1/workspace/kill-switch', { active: true });
        expect(toggled.status).toBe(200);
        await run.modelCall(() => executed++, { model: 'gpt-4o-mini' });
        return 'unreachable';
      })
      .catch((error: unknown) => error);

    expect(caught).toBeInstanceOf(GuardBlockedError);
    const blocked = caught as GuardBlockedError;
    expect(blocked).toMatchObject({ denyReason: 'KILL_SWITCH_ACTIVE', runId, userId: 'carol' });
    expect(executed).toBe(1);
    const run = await detailOf(ws, runId);
    expect(run.status).toBe('FAILED');
    expect(run.steps.map((s) => [s.sequence, s.type, s.status])).toEqual([
      [1, 'TOOL_CALL', 'COMPLETED'],
      [2, 'MODEL_CALL', 'BLOCKED'],
    ]);
    expect(run.steps[1]).toMatchObject({
      id: blocked.stepId,
      duration_ms: null,
      decision: { outcome: 'DENY', reason: 'KILL_SWITCH_ACTIVE', evaluated_rules: { kill_switch: 'DENY' } },
    });
    // And a new run cannot start while it is on.
    await expect(ws.guard.run('carol', () => executed++)).rejects.toMatchObject({ denyReason: 'KILL_SWITCH_ACTIVE' });
    expect(executed).toBe(1);
  });

  it('when 20 calls run concurrently in one run, then they get sequences 1..20 in call order, all COMPLETED', async () => {
    const ws = await freshWorkspace();
    let runId = '';
    const results = await ws.guard.run('dave', (run) => {
      runId = run.id;
      return Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          i % 2 === 0
            ? run.modelCall(
                async () => {
                  await sleep((i * 7) % 15);
                  return chatCompletion(i + 1, 1);
                },
                { model: 'm', inputData: { call: i }, tokenExtractor: extractors.openai },
              )
            : run.toolCall(
                async () => {
                  await sleep((i * 5) % 11);
                  return i;
                },
                { toolName: `tool-${i}`, inputData: { call: i } },
              ),
        ),
      );
    });

    expect(results).toHaveLength(20);
    const run = await detailOf(ws, runId);
    expect(run.status).toBe('COMPLETED');
    expect(run.steps.map((s) => s.sequence)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(run.steps.every((s) => s.status === 'COMPLETED')).toBe(true);
    expect(run.steps.map((s) => s.input_data)).toEqual(Array.from({ length: 20 }, (_, i) => ({ call: i })));
    // Model calls 0, 2, ..., 18 reported i + 1 prompt tokens and 1 completion token each.
    expect(run.total_tokens).toBe([...Array(10).keys()].reduce((sum, k) => sum + (2 * k + 1) + 1, 0));
  });

  it('when sync and async fns are guarded, then their values come back and their steps are recorded alike', async () => {
    const ws = await freshWorkspace();
    let runId = '';
    const syncBoom = new RangeError('sync failure');
    const values = await ws.guard.run('erin', (run) => {
      runId = run.id;
      const sync = run.toolCall(() => 'sync value', { toolName: 'sync' });
      const asyncValue = run.toolCall(async () => 'async value', { toolName: 'async' });
      const syncModel = run.modelCall(() => chatCompletion(3, 4), { model: 'm', tokenExtractor: extractors.openai });
      const failing = run
        .toolCall(
          () => {
            throw syncBoom;
          },
          { toolName: 'sync-throws' },
        )
        .catch((error: unknown) => error);
      return Promise.all([sync, asyncValue, syncModel.then((r) => r.usage.total_tokens), failing]);
    });

    expect(values).toEqual(['sync value', 'async value', 7, syncBoom]);
    expect(values[3]).toBe(syncBoom);
    const run = await detailOf(ws, runId);
    expect(run.status).toBe('COMPLETED');
    expect(run.steps.map((s) => [s.tool_name ?? s.model, s.status])).toEqual([
      ['sync', 'COMPLETED'],
      ['async', 'COMPLETED'],
      ['m', 'COMPLETED'],
      ['sync-throws', 'FAILED'],
    ]);
    expect(run.steps[2]).toMatchObject({ prompt_tokens: 3, completion_tokens: 4 });

    // A synchronous run callback works too.
    await expect(ws.guard.run('erin', () => 42)).resolves.toBe(42);
  });

  // The embedded backend runs the core above; these SDK-side behaviours do not depend on the store.
  if (full) {
    it('when guard.modelCall is used deep inside two concurrent runs, then each step lands in its own run', async () => {
      const ws = await freshWorkspace();
      const guard = ws.guard;
      // Library code that has no run handle: it finds the current run through AsyncLocalStorage.
      const askModel = async (question: string) => {
        await sleep(question.length % 5);
        return guard.modelCall(() => chatCompletion(question.length, 2), {
          model: 'm',
          inputData: { question },
          tokenExtractor: extractors.openai,
        });
      };
      const lookUp = (q: string) => guard.toolCall(() => `result for ${q}`, { toolName: 'lookup', inputData: { q } });
      const agent = (user: string) =>
        guard.run(user, async (run: RunHandle) => {
          expect(guard.currentRun).toBe(run);
          await askModel(`${user}: first`);
          await Promise.all([lookUp(`${user}-a`), lookUp(`${user}-b`)]);
          await askModel(`${user}: second`);
          return run.id;
        });

      const [frankRun, graceRun] = await Promise.all([agent('frank'), agent('grace')]);
      for (const [user, runId] of [
        ['frank', frankRun],
        ['grace', graceRun],
      ] as const) {
        const run = await detailOf(ws, runId);
        expect(run).toMatchObject({ user_id: user, status: 'COMPLETED' });
        expect(run.steps.map((s) => s.sequence)).toEqual([1, 2, 3, 4]);
        expect(run.steps.map((s) => JSON.stringify(s.input_data))).toEqual([
          JSON.stringify({ question: `${user}: first` }),
          expect.stringContaining(`"${user}-`),
          expect.stringContaining(`"${user}-`),
          JSON.stringify({ question: `${user}: second` }),
        ]);
      }
      expect(guard.currentRun).toBeUndefined();
      await expect(guard.modelCall(() => 1, { model: 'm' })).rejects.toBeInstanceOf(NoActiveRunError);
    });

    it('when a blocked step is caught inside fn, then the run goes on and ends COMPLETED', async () => {
      const ws = await freshWorkspace();
      let runId = '';
      const outcome = await ws.guard.run('heidi', async (run) => {
        runId = run.id;
        await ws.api.request('POST', '/v1/workspace/kill-switch', { active: true });
        try {
          await run.modelCall(() => 'never', { model: 'm' });
        } catch (error) {
          if (error instanceof GuardBlockedError) return `fallback (${error.denyReason})`;
          throw error;
        }
        return 'model answered';
      });

      expect(outcome).toBe('fallback (KILL_SWITCH_ACTIVE)');
      const run = await detailOf(ws, runId);
      expect(run.status).toBe('COMPLETED');
      expect(run.steps.map((s) => s.status)).toEqual(['BLOCKED']);
    });

    it('when a step is recorded after the run ended, then the SDK refuses it and the server still has the ended run', async () => {
      const ws = await freshWorkspace();
      let handle: RunHandle | undefined;
      await ws.guard.run('ivan', (run) => {
        handle = run;
      });
      await expect(handle!.toolCall(() => 1, { toolName: 'late' })).rejects.toThrow(/has ended/);
      expect((await detailOf(ws, handle!.id)).steps).toEqual([]);
      // The server says the same when asked directly.
      const late = await ws.api.request('POST', `/v1/runs/${handle!.id}/steps`, {
        type: 'TOOL_CALL',
        sequence: 1,
        tool_name: 'late',
      });
      expect(late.body.code).toBe('RUN_NOT_RUNNING');
    });

    it('when the same user starts identical runs, then each is its own run: idempotency keys are per call, not per body', async () => {
      const ws = await freshWorkspace();
      const ids = await Promise.all(
        Array.from({ length: 3 }, () => ws.guard.run('judy', (run) => run.id, { metadata: { same: true } })),
      );
      expect(new Set(ids).size).toBe(3);
      expect((await runsOf(ws, 'judy')).map((r) => r.status)).toEqual(['COMPLETED', 'COMPLETED', 'COMPLETED']);
    });

    it('when the server answers a conflict, then the SDK throws ConflictError with the code of the server', async () => {
      const ws = await freshWorkspace();
      let runId = '';
      // The run is ended behind the SDK's back: its own end then gets 409 RUN_NOT_RUNNING.
      const caught = await ws.guard
        .run('ken', async (run) => {
          runId = run.id;
          await ws.api.request('POST', `/v1/runs/${run.id}/end`, { status: 'FAILED' });
          return 'done';
        })
        .catch((error: unknown) => error);
      expect(caught).toBeInstanceOf(ConflictError);
      expect(caught).toMatchObject({ status: 409, code: 'RUN_NOT_RUNNING', requestId: expect.any(String) });
      expect((await detailOf(ws, runId)).status).toBe('FAILED');
    });
  }
});

describe('token extractors on responses of the real provider SDKs, recorded by the daemon', () => {
  let daemon: TestApi;
  let upstream: FakeUpstream;
  let guard: GuardClient;
  let openai: OpenAI;
  let anthropic: Anthropic;

  beforeAll(async () => {
    [daemon, upstream] = await Promise.all([
      startTestApi('postgres+redis'),
      startFakeUpstream({ promptTokens: 120, completionTokens: 30, cachedTokens: 20 }),
    ]);
    guard = new GuardClient({ apiKey: daemon.apiKey, baseUrl: daemon.url });
    openai = new OpenAI({ baseURL: `${upstream.url}/v1`, apiKey: 'sk-test', maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: upstream.url, apiKey: 'sk-ant-test', maxRetries: 0 });
    await daemon.request('PUT', '/v1/model-pricing/gpt-4o-mini', {
      input_cost_per_token: 1.5e-7,
      output_cost_per_token: 6e-7,
    });
  });
  afterAll(async () => {
    await guard?.close();
    await Promise.all([daemon?.close(), upstream?.close()]);
  });

  it('when each provider call goes through its extractor, then the daemon records the usage the provider reported', async () => {
    let runId = '';
    const usage = await guard.run('extractor-user', async (run) => {
      runId = run.id;
      const chat = await run.modelCall(
        () => openai.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }),
        { model: 'gpt-4o-mini', tokenExtractor: extractors.openai },
      );
      const responses = await run.modelCall(() => openai.responses.create({ model: 'gpt-4o-mini', input: 'hi' }), {
        model: 'gpt-4o-mini',
        tokenExtractor: extractors.openaiResponses,
      });
      const message = await run.modelCall(
        () =>
          anthropic.messages.create({
            model: 'claude-haiku-4-5',
            max_tokens: 32,
            messages: [{ role: 'user', content: 'hi' }],
          }),
        { model: 'claude-haiku-4-5', tokenExtractor: extractors.anthropic },
      );
      // A stream read to its end is reported then; asked without stream_options.include_usage,
      // OpenAI sends no usage: no token counts, not a failure (test/client/sdk-streams.test.ts prices streams).
      const stream = await run.modelCall(
        () =>
          openai.chat.completions.create({
            model: 'gpt-4o-mini',
            messages: [{ role: 'user', content: 'hi' }],
            stream: true,
          }),
        { model: 'gpt-4o-mini', tokenExtractor: extractors.openai },
      );
      for await (const chunk of stream) void chunk;
      return { chat: chat.usage, responses: responses.usage, message: message.usage };
    });

    const run = (await daemon.request<Run>('GET', `/v1/runs/${runId}`)).body;
    expect(run.status).toBe('COMPLETED');
    const tokens = run.steps.map((s) => [s.prompt_tokens, s.completion_tokens]);
    expect(tokens).toEqual([
      [usage.chat!.prompt_tokens, usage.chat!.completion_tokens],
      [usage.responses!.input_tokens, usage.responses!.output_tokens],
      // Anthropic counts the prompt cache's reads apart from input_tokens; they are prompt tokens too.
      [
        usage.message.input_tokens +
          (usage.message.cache_creation_input_tokens ?? 0) +
          (usage.message.cache_read_input_tokens ?? 0),
        usage.message.output_tokens,
      ],
      [null, null],
    ]);
    expect(tokens[0]).toEqual([120, 30]);
    expect(usage.message.cache_read_input_tokens).toBe(20);
    expect(tokens[2]).toEqual([120, 30]);
    // 120 x 0.00000015 + 30 x 0.0000006 = 0.000036; the Anthropic model has no pricing entry.
    expect(run.steps.map((s) => s.cost_usd)).toEqual([0.000036, 0.000036, null, null]);
  });
});

describe('SDK steps and calls proxied into the same run', () => {
  let daemon: TestApi;
  let upstream: FakeUpstream;
  let guard: GuardClient;

  beforeAll(async () => {
    upstream = await startFakeUpstream({ promptTokens: 10, completionTokens: 2 });
    daemon = await startTestApi('postgres+redis', { proxy: { upstream: upstream.url } });
    guard = new GuardClient({ apiKey: daemon.apiKey, baseUrl: daemon.url });
  });
  afterAll(async () => {
    await guard?.close();
    await Promise.all([daemon?.close(), upstream?.close()]);
  });

  it("when proxied calls took the run's next sequences, then the SDK's steps go past them and the run completes", async () => {
    let runId = '';
    const proxied = (id: string) =>
      new OpenAI({
        baseURL: `${daemon.url}/proxy/runs/${id}/openai/v1`,
        apiKey: 'sk-test',
        maxRetries: 0,
        defaultHeaders: { 'x-runguard-key': daemon.apiKey },
      }).chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    await guard.run('mixed-user', async (run) => {
      runId = run.id;
      for (let i = 0; i < 5; i++) await proxied(run.id); // sequences 1-5, unseen by the SDK
      await run.toolCall(() => 'a', { toolName: 'first' });
      await run.modelCall(async () => chatCompletion(3, 1), {
        model: 'gpt-4o-mini',
        tokenExtractor: extractors.openai,
      });
      await proxied(run.id);
      await Promise.all([
        run.toolCall(() => 'b', { toolName: 'second' }),
        run.toolCall(() => 'c', { toolName: 'third' }),
      ]);
    });

    const run = (await daemon.request<Run>('GET', `/v1/runs/${runId}`)).body;
    expect(run.status).toBe('COMPLETED');
    expect(run.steps).toHaveLength(10);
    expect(run.steps.every((s) => s.status === 'COMPLETED')).toBe(true);
    const sequences = run.steps.map((s) => s.sequence);
    expect(new Set(sequences).size).toBe(10);
    // In the order they were made: the proxied calls first, the SDK's steps after them. (The last two
    // were made together; a collision can swap them.)
    const names = run.steps.map((s) => s.tool_name ?? s.type);
    expect(names.slice(0, 8)).toEqual([
      'MODEL_CALL',
      'MODEL_CALL',
      'MODEL_CALL',
      'MODEL_CALL',
      'MODEL_CALL',
      'first',
      'MODEL_CALL',
      'MODEL_CALL',
    ]);
    expect(names.slice(8).sort()).toEqual(['second', 'third']);
  });
});

describe('retries through a connection that drops the answer (the daemon processed the request)', () => {
  let daemon: TestApi;
  let relay: HttpRelay;
  let guard: GuardClient;

  beforeAll(async () => {
    daemon = await startTestApi('postgres+redis');
  });
  afterEach(async () => {
    await guard?.close();
    await relay?.close();
  });
  afterAll(async () => {
    await daemon?.close();
  });

  const throughRelay = async () => {
    relay = await startHttpRelay(daemon.url);
    guard = new GuardClient({ apiKey: daemon.apiKey, baseUrl: relay.url, maxRetries: 5 });
  };
  const runsOf = async (userId: string) =>
    (await daemon.request<{ items: RunSummary[] }>('GET', `/v1/runs?user_id=${userId}`)).body.items;
  const today = () => new Date().toISOString().slice(0, 10);
  const countersFor = async (userId: string) => {
    const scope = { workspaceId: daemon.workspaceId, userId, day: today(), month: today().slice(0, 7) };
    return { ...(await daemon.stores.counters.readSpend(scope)), ...(await runCounts(daemon.stores.db, scope)) };
  };

  /** The two attempts of one logical call: the first lost its answer, the retry carried the same key. */
  const expectRetriedOnce = (method: string, path: RegExp) => {
    const attempts = relay.requestsTo(method, path);
    const dropped = attempts.filter((r) => r.outcome === 'answer-dropped');
    expect(dropped).toHaveLength(1);
    const { idempotencyKey, status } = dropped[0]!;
    expect(idempotencyKey).toMatch(/^[0-9a-f-]{36}$/);
    const sameKey = attempts.filter((r) => r.idempotencyKey === idempotencyKey);
    expect(sameKey.map((r) => [r.outcome, r.status])).toEqual([
      ['answer-dropped', status],
      ['relayed', status],
    ]);
  };

  it('when the answer to the run start is lost, then the retry gets the same run: exactly one run exists', async () => {
    await throughRelay();
    relay.dropAnswer({ method: 'POST', path: RUN_START });
    const before = await countersFor('drop-start');

    const runId = await guard.run('drop-start', (run) => run.id);

    const runs = await runsOf('drop-start');
    expect(runs.map((r) => [r.id, r.status])).toEqual([[runId, 'COMPLETED']]);
    const after = await countersFor('drop-start');
    expect(after.monthlyRuns - before.monthlyRuns).toBe(1);
    expect(after.concurrentRuns).toBe(before.concurrentRuns);
    expectRetriedOnce('POST', RUN_START);
  });

  it('when the answer to a step creation is lost, then fn runs once and one step exists', async () => {
    await throughRelay();
    relay.dropAnswer({ method: 'POST', path: STEP_CREATE });
    let calls = 0;

    const runId = await guard.run('drop-step', async (run) => {
      await run.modelCall(
        () => {
          calls++;
          return chatCompletion(10, 5);
        },
        { model: 'm', tokenExtractor: extractors.openai },
      );
      return run.id;
    });

    expect(calls).toBe(1);
    expect((await runsOf('drop-step')).map((r) => [r.id, r.step_count])).toEqual([[runId, 1]]);
    const run = (await daemon.request<Run>('GET', `/v1/runs/${runId}`)).body;
    expect(run.steps.map((s) => [s.sequence, s.status, s.prompt_tokens])).toEqual([[1, 'COMPLETED', 10]]);
    expectRetriedOnce('POST', STEP_CREATE);
  });

  it('when the answer to a step update is lost, then the retry is replayed (no 409) and the spend counts once', async () => {
    await throughRelay();
    await daemon.request('PUT', '/v1/model-pricing/dime', { input_cost_per_token: 0.1, output_cost_per_token: 0 });
    relay.dropAnswer({ method: 'PATCH', path: STEP_UPDATE });
    const before = await countersFor('drop-patch');

    const runId = await guard.run('drop-patch', async (run) => {
      await run.modelCall(() => chatCompletion(3, 0), { model: 'dime', tokenExtractor: extractors.openai });
      return run.id;
    });

    const run = (await daemon.request<Run>('GET', `/v1/runs/${runId}`)).body;
    expect(run).toMatchObject({ status: 'COMPLETED', total_cost_usd: 0.3 });
    expect(run.steps.map((s) => [s.status, s.prompt_tokens, s.cost_usd])).toEqual([['COMPLETED', 3, 0.3]]);
    const after = await countersFor('drop-patch');
    expect(after.userDailySpendMicros - before.userDailySpendMicros).toBe(300_000);
    expectRetriedOnce('PATCH', STEP_UPDATE);
  });

  it('when the answer to the run end is lost, then the run ends once and frees its concurrency slot once', async () => {
    await throughRelay();
    relay.dropAnswer({ method: 'POST', path: RUN_END });
    const before = await countersFor('drop-end');

    const runId = await guard.run('drop-end', (run) => run.id);

    expect((await runsOf('drop-end')).map((r) => [r.id, r.status])).toEqual([[runId, 'COMPLETED']]);
    expect((await countersFor('drop-end')).concurrentRuns).toBe(before.concurrentRuns);
    expectRetriedOnce('POST', RUN_END);
  });

  it('when every write of a run loses its first answer, then the run is recorded exactly as without faults', async () => {
    await throughRelay();
    for (const [method, path] of [
      ['POST', RUN_START],
      ['POST', STEP_CREATE],
      ['PATCH', STEP_UPDATE],
      ['POST', RUN_END],
    ] as const) {
      relay.dropAnswer({ method, path });
    }
    let calls = 0;

    const runId = await guard.run(
      'drop-all',
      async (run) => {
        await run.toolCall(() => calls++, { toolName: 'search' });
        return run.id;
      },
      { metadata: { ticket: 7 } },
    );

    expect(relay.requests.filter((r) => r.outcome === 'answer-dropped')).toHaveLength(4);
    expect(calls).toBe(1);
    const keys = relay.requests.map((r) => r.idempotencyKey);
    // Four logical calls, four keys, each sent twice.
    expect(new Set(keys).size).toBe(4);
    const run = (await daemon.request<Run>('GET', `/v1/runs/${runId}`)).body;
    expect(run).toMatchObject({ status: 'COMPLETED', metadata: { ticket: 7 } });
    expect(run.steps.map((s) => [s.sequence, s.status])).toEqual([[1, 'COMPLETED']]);
    expect(await runsOf('drop-all')).toHaveLength(1);
  });
});
