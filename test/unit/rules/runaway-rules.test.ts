/**
 * The rules beyond the seed for runaway agents (issue #39): run_step_limit, run_budget,
 * repeated_calls, user_rate. Pure, table-driven: each is evaluated only where configured, after
 * rule 7, in this order, and a denial carries its numbers.
 */
import { describe, expect, it } from 'vitest';
import { explainDenial } from '../../../src/contract/denial-detail.js';
import { evaluate, type GuardSnapshot } from '../../../src/rules/engine.js';
import { OPEN_SNAPSHOT as open } from '../../support/guard-snapshot.js';

const rate = (stepsInWindow: number, limit: number): GuardSnapshot['userRate'] => ({
  stepsInWindow,
  limit,
  windowSeconds: 60,
  retryAt: '2026-11-26T20:00:12Z',
  retryAfterSeconds: 12,
});

/** Every new rule configured, none denying. */
const limited: GuardSnapshot = {
  ...open,
  modelPriced: { model: 'm', priced: true },
  runSteps: { allowed: 9, limit: 10 },
  runCost: { costMicros: 999_999, reservedMicros: 0, limitMicros: 1_000_000 },
  repeatedCalls: { identicalCalls: 2, limit: 3 },
  userRate: rate(59, 60),
};

const SEED_STEP = ['kill_switch', 'user_blocked', 'workspace_daily_budget', 'user_daily_budget'];

describe('runaway rules', () => {
  it('when none is configured, then a step evaluates rules 1 to 4 only', () => {
    expect(Object.keys(evaluate('step', open).evaluated_rules)).toEqual(SEED_STEP);
  });

  it('when all are configured and none denies, then they pass after rule 7 in the contract order', () => {
    const decision = evaluate('step', limited);
    expect(decision.outcome).toBe('ALLOW');
    expect(decision.detail).toBeUndefined();
    expect(Object.keys(decision.evaluated_rules)).toEqual([
      ...SEED_STEP,
      'model_priced',
      'run_step_limit',
      'run_budget',
      'repeated_calls',
      'user_rate',
    ]);
  });

  it('when only one is configured, then only that one appears', () => {
    expect(
      Object.keys(evaluate('step', { ...open, repeatedCalls: { identicalCalls: 0, limit: 1 } }).evaluated_rules),
    ).toEqual([...SEED_STEP, 'repeated_calls']);
  });

  it('when a run start is decided, then none of them is evaluated', () => {
    const decision = evaluate('run_start', { ...limited, runSteps: { allowed: 10, limit: 10 } });
    expect(decision.outcome).toBe('ALLOW');
    expect(decision.evaluated_rules.run_step_limit).toBeUndefined();
  });

  it.each([
    {
      name: 'run_step_limit at its limit',
      snapshot: { runSteps: { allowed: 10, limit: 10 } },
      reason: 'RUN_STEP_LIMIT_EXCEEDED',
      detail: { steps: 10, limit: 10 },
      words: 'run step limit reached: 10 of 10 steps',
    },
    {
      name: 'run_budget when the cost reached it',
      snapshot: { runCost: { costMicros: 1_000_000, reservedMicros: 0, limitMicros: 1_000_000 } },
      reason: 'RUN_BUDGET_EXCEEDED',
      detail: { run_cost_usd: 1, reserved_usd: 0, limit_usd: 1 },
      words: 'run budget spent: $1 of $1',
    },
    {
      name: 'run_budget when cost and reservations reach it',
      snapshot: { runCost: { costMicros: 600_000, reservedMicros: 400_000, limitMicros: 1_000_000 } },
      reason: 'RUN_BUDGET_EXCEEDED',
      detail: { run_cost_usd: 0.6, reserved_usd: 0.4, limit_usd: 1 },
      words: 'run budget spent: $0.6 (+ $0.4 reserved) of $1',
    },
    {
      name: 'repeated_calls past the identical calls allowed',
      snapshot: { repeatedCalls: { identicalCalls: 3, limit: 3 } },
      reason: 'REPEATED_CALL_LOOP',
      detail: { identical_calls: 3, limit: 3 },
      words: 'the same call repeated in a loop: 3 identical calls in a row, the limit is 3',
    },
    {
      name: 'user_rate with a full window',
      snapshot: { userRate: rate(60, 60) },
      reason: 'USER_RATE_LIMITED',
      detail: { steps_in_window: 60, limit: 60, window_s: 60, retry_after_s: 12, retry_at: '2026-11-26T20:00:12Z' },
      words: 'user step rate limit reached: 60 of 60 steps in 60 s; retry after 12 s (2026-11-26T20:00:12Z)',
    },
  ])('when $name, then it denies with its numbers', ({ snapshot, reason, detail, words }) => {
    const decision = evaluate('step', { ...limited, ...snapshot });
    expect(decision).toMatchObject({ outcome: 'DENY', reason, detail });
    expect(Object.values(decision.evaluated_rules).at(-1)).toBe('DENY');
    expect(explainDenial(reason, decision.detail)).toBe(words);
  });

  it.each([
    ['spend and reservations leave room for the estimate', 600_000, 300_000, 100_000, 'ALLOW'],
    ['the estimate would take the run past its limit', 600_000, 300_000, 100_001, 'DENY'],
    ['spend and reservations reach it before any estimate', 700_000, 300_000, 0, 'DENY'],
  ] as const)('when in reserve mode %s, then the run budget answers %s', (_name, cost, reserved, estimate, outcome) => {
    const decision = evaluate('step', {
      ...open,
      runCost: { costMicros: cost, reservedMicros: reserved, limitMicros: 1_000_000, estimateMicros: estimate },
    });
    expect(decision.outcome).toBe(outcome);
    if (outcome === 'DENY')
      expect(decision.detail).toEqual({ run_cost_usd: cost / 1e6, reserved_usd: reserved / 1e6, limit_usd: 1 });
  });

  it('when a run budget of 0 is set, then the first step is denied', () => {
    expect(evaluate('step', { ...open, runCost: { costMicros: 0, reservedMicros: 0, limitMicros: 0 } }).reason).toBe(
      'RUN_BUDGET_EXCEEDED',
    );
  });

  it('when several deny, then the first in order wins and later ones are not evaluated', () => {
    const decision = evaluate('step', {
      ...limited,
      runSteps: { allowed: 10, limit: 10 },
      repeatedCalls: { identicalCalls: 5, limit: 3 },
      userRate: rate(60, 60),
    });
    expect(decision.reason).toBe('RUN_STEP_LIMIT_EXCEEDED');
    expect(Object.keys(decision.evaluated_rules)).toEqual([...SEED_STEP, 'model_priced', 'run_step_limit']);
  });

  it.each([
    ['the kill switch', { killSwitchActive: true }, 'KILL_SWITCH_ACTIVE'],
    ['a blocked user', { userBlocked: true }, 'USER_BLOCKED'],
    ['the workspace budget', { workspaceDailyBudgetMicros: 0 }, 'WORKSPACE_DAILY_BUDGET_EXCEEDED'],
    ['the user budget', { userDailyBudgetMicros: 0 }, 'USER_DAILY_BUDGET_EXCEEDED'],
    ['an unpriced model', { modelPriced: { model: 'm', priced: false } }, 'MODEL_NOT_PRICED'],
  ])('when %s denies too, then it comes before the runaway rules', (_name, seed, reason) => {
    const decision = evaluate('step', {
      ...limited,
      ...seed,
      runSteps: { allowed: 10, limit: 10 },
      userRate: rate(60, 60),
    });
    expect(decision.reason).toBe(reason);
    expect(decision.evaluated_rules.run_step_limit).toBeUndefined();
  });
});
