/**
 * Property-based: random sequences of API operations across two workspaces, with invariants
 * checked after each step: no 5xx, counters equal what the records imply, and neither
 * workspace ever sees or changes the other's data.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApi, type Caller, type TestApi } from '../support/harness.js';
import { clearOfUtcMidnight, MIDNIGHT_HOOK_TIMEOUT_MS } from '../support/utc-day.js';

type Op =
  | { kind: 'start'; ws: number; user: number }
  | { kind: 'end'; ws: number; run: number; status: 'COMPLETED' | 'FAILED' }
  | { kind: 'step'; ws: number; run: number; model: number }
  | { kind: 'finish'; ws: number; step: number; prompt: number; completion: number }
  | { kind: 'budget'; ws: number; usd: number | null }
  | { kind: 'block'; ws: number; user: number; blocked: boolean }
  | { kind: 'limit'; ws: number; concurrent: number }
  | { kind: 'kill'; ws: number; active: boolean }
  | { kind: 'trespass'; ws: number; run: number };

const ws = fc.integer({ min: 0, max: 1 });
const index = fc.nat({ max: 20 });
const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('start' as const), ws, user: fc.nat({ max: 3 }) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('end' as const),
      ws,
      run: index,
      status: fc.constantFrom('COMPLETED' as const, 'FAILED' as const),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({ kind: fc.constant('step' as const), ws, run: index, model: fc.nat({ max: 2 }) }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('finish' as const),
      ws,
      step: index,
      prompt: fc.nat({ max: 5000 }),
      completion: fc.nat({ max: 5000 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('budget' as const),
      ws,
      usd: fc.option(fc.double({ min: 0, max: 0.05, noNaN: true }), { nil: null }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('block' as const), ws, user: fc.nat({ max: 3 }), blocked: fc.boolean() }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('limit' as const), ws, concurrent: fc.integer({ min: 0, max: 4 }) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('kill' as const), ws, active: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('trespass' as const), ws, run: index }) },
);

describe('random operation sequences', () => {
  let api: TestApi;
  beforeAll(async () => {
    await clearOfUtcMidnight();
    api = await startTestApi('postgres+redis');
  }, MIDNIGHT_HOOK_TIMEOUT_MS);
  afterAll(async () => {
    await api?.close();
  });

  it('keep every invariant after every operation', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 5, maxLength: 25 }), async (ops) => {
        const spaces = await Promise.all([api.newWorkspace('scale'), api.newWorkspace('scale')]);
        const state = spaces.map(() => ({ runs: [] as string[], steps: [] as { run: string; id: string }[] }));
        for (const [i, model] of ['cheap', 'dear', 'free'].entries()) {
          for (const s of spaces) {
            await s.api.request('PUT', `/v1/model-pricing/${model}`, {
              input_cost_per_token: [1e-6, 3.3e-5, 0][i],
              output_cost_per_token: [2e-6, 7.7e-5, 0][i],
            });
          }
        }
        for (const o of ops) {
          const me: Caller = spaces[o.ws]!.api;
          const mine = state[o.ws]!;
          let res;
          switch (o.kind) {
            case 'start':
              res = await me.request('POST', '/v1/runs', { user_id: `user${o.user}` });
              if (res.body.status === 'RUNNING') mine.runs.push(res.body.id);
              break;
            case 'end':
              if (!mine.runs.length) continue;
              res = await me.request('POST', `/v1/runs/${mine.runs[o.run % mine.runs.length]}/end`, {
                status: o.status,
              });
              expect([200, 409]).toContain(res.status);
              break;
            case 'step': {
              if (!mine.runs.length) continue;
              const run = mine.runs[o.run % mine.runs.length]!;
              const detail = await me.request('GET', `/v1/runs/${run}`);
              res = await me.request('POST', `/v1/runs/${run}/steps`, {
                type: 'MODEL_CALL',
                sequence: detail.body.step_count + 1,
                model: ['cheap', 'dear', 'free'][o.model],
              });
              expect([201, 409]).toContain(res.status);
              if (res.body.status === 'ALLOWED') mine.steps.push({ run, id: res.body.id });
              break;
            }
            case 'finish': {
              if (!mine.steps.length) continue;
              const s = mine.steps[o.step % mine.steps.length]!;
              res = await me.request('PATCH', `/v1/runs/${s.run}/steps/${s.id}`, {
                status: 'COMPLETED',
                prompt_tokens: o.prompt,
                completion_tokens: o.completion,
              });
              expect([200, 409]).toContain(res.status);
              break;
            }
            case 'budget':
              res = await me.request('PATCH', '/v1/workspace', { daily_budget_usd: o.usd });
              break;
            case 'block':
              res = await me.request('PUT', `/v1/users/user${o.user}`, { blocked: o.blocked });
              break;
            case 'limit':
              res = await me.request('PATCH', '/v1/workspace', { max_concurrent_runs: o.concurrent });
              break;
            case 'kill':
              res = await me.request('POST', '/v1/workspace/kill-switch', { active: o.active });
              break;
            case 'trespass': {
              const theirs = state[1 - o.ws]!;
              if (!theirs.runs.length) continue;
              const run = theirs.runs[o.run % theirs.runs.length];
              res = await me.request('GET', `/v1/runs/${run}`);
              expect(res.status).toBe(404);
              expect((await me.request('POST', `/v1/runs/${run}/end`, { status: 'FAILED' })).status).toBe(404);
              break;
            }
          }
          expect(res.status, `${o.kind} ${JSON.stringify(res.body)}`).toBeLessThan(500);
        }
        // Invariants: counters equal the records, per workspace, and lists hold only its own runs.
        for (const [i, s] of spaces.entries()) {
          const usage = (await s.api.request('GET', '/v1/usage?days=1')).body;
          const list = (await s.api.request('GET', '/v1/runs?per_page=100')).body;
          const running = list.items.filter((r: any) => r.status === 'RUNNING').length;
          const allowed = list.items.filter((r: any) => r.status !== 'BLOCKED').length;
          const spend = list.items.reduce((sum: number, r: any) => sum + Math.round(r.total_cost_usd * 1e6), 0);
          expect(usage.concurrent_runs).toBe(running);
          expect(usage.monthly_runs).toBe(allowed);
          // Prices are whole microdollars per token, so every cost is exact and the sums must match.
          expect(Math.round(usage.workspace_daily_spend_usd * 1e6)).toBe(spend);
          const other = new Set(state[1 - i]!.runs);
          expect(list.items.some((r: any) => other.has(r.id))).toBe(false);
        }
      }),
      { numRuns: 12 },
    );
  });
});
