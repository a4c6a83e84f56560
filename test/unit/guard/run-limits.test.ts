/**
 * What the runaway rules read, gathered for the engine (src/guard/run-limits.ts): a run's limits
 * from the workspace's defaults and its own (the tighter wins), the loop rule's canonical hash, and
 * the user rate's retry time. Pure: no service needed.
 */
import { describe, expect, it } from 'vitest';
import { callHash, canonicalJson, resolveRunLimits, userRateInput } from '../../../src/guard/run-limits.js';
import type { WorkspaceRow } from '../../../src/store/workspaces.js';

const workspace = (defaults: Partial<WorkspaceRow>) =>
  ({
    run_max_steps: null,
    run_max_cost_micros: null,
    run_max_identical_calls: null,
    user_steps_per_minute: null,
    ...defaults,
  }) as WorkspaceRow;

describe('run limits', () => {
  it('when neither the workspace nor the run sets a limit, then the run has none', () => {
    expect(resolveRunLimits(workspace({}), undefined)).toBeNull();
    expect(resolveRunLimits(workspace({}), { max_steps: null })).toBeNull();
  });

  it("when the run asks for looser limits than the workspace's, then they are clamped; tighter ones apply", () => {
    expect(
      resolveRunLimits(workspace({ run_max_steps: 10, run_max_cost_micros: 1_000_000 }), {
        max_steps: 50,
        max_cost_usd: 0.25,
        max_identical_calls: 3,
      }),
    ).toEqual({ maxSteps: 10, maxCostMicros: 250_000, maxIdenticalCalls: 3 });
  });

  it('when only the workspace sets one, then the run takes it', () => {
    expect(resolveRunLimits(workspace({ run_max_identical_calls: 4 }), {})).toEqual({
      maxSteps: null,
      maxCostMicros: null,
      maxIdenticalCalls: 4,
    });
  });
});

describe('the loop rule hash', () => {
  it('when only the key order differs, at any depth, then the hash is the same', () => {
    const call = (input: unknown) => callHash({ type: 'TOOL_CALL', tool_name: 'search', input });
    expect(call({ q: 'x', opts: { a: 1, b: [1, { d: 2, c: 3 }] } })).toBe(
      call({ opts: { b: [1, { c: 3, d: 2 }], a: 1 }, q: 'x' }),
    );
    expect(canonicalJson({ b: 1, a: [{ z: null, y: 'é' }] })).toBe('{"a":[{"y":"é","z":null}],"b":1}');
  });

  it('when the tool, model, type, an array order or a value differs, then the hash differs', () => {
    const base = { type: 'TOOL_CALL', tool_name: 'search', model: null, input: { q: [1, 2] } };
    const hashes = new Set([
      callHash(base),
      callHash({ ...base, tool_name: 'fetch' }),
      callHash({ ...base, type: 'MODEL_CALL' }),
      callHash({ ...base, model: 'gpt-4o-mini' }),
      callHash({ ...base, input: { q: [2, 1] } }),
      callHash({ ...base, input: { q: [1, '2'] } }),
      callHash({ ...base, input: null }),
    ]);
    expect(hashes.size).toBe(7);
  });
});

describe('the user rate input', () => {
  it('when the window is full, then a retry is due when its oldest step leaves it, in whole seconds', () => {
    const now = Date.parse('2026-11-26T20:00:00.000Z');
    const input = userRateInput(
      { stepsInWindow: 5, taken: false, oldestAtMs: now - 47_500, release: async () => {} },
      5,
      now,
    );
    expect(input).toEqual({
      stepsInWindow: 5,
      limit: 5,
      windowSeconds: 60,
      retryAfterSeconds: 13,
      retryAt: '2026-11-26T20:00:13Z',
    });
  });
});
