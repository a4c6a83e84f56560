import { describe, expect, it } from 'vitest';
import { explainDenial } from '../../../src/contract/denial-detail.js';
import { evaluate, type Boundary, type GuardSnapshot } from '../../../src/rules/engine.js';
import { OPEN_SNAPSHOT as open } from '../../support/guard-snapshot.js';

const ALL = [
  'kill_switch',
  'user_blocked',
  'workspace_daily_budget',
  'user_daily_budget',
  'monthly_run_limit',
  'max_concurrent_runs',
];

describe('rule engine', () => {
  it('when nothing denies a run start, then all six rules pass in priority order', () => {
    const d = evaluate('run_start', open);
    expect(d).toEqual({
      outcome: 'ALLOW',
      reason: null,
      evaluated_rules: Object.fromEntries(ALL.map((k) => [k, 'PASS'])),
    });
    expect(Object.keys(d.evaluated_rules)).toEqual(ALL);
  });

  it('when nothing denies a step, then only rules 1 to 4 are evaluated', () => {
    const d = evaluate('step', { ...open, monthlyRunLimit: 0, maxConcurrentRuns: 0 });
    expect(d.outcome).toBe('ALLOW');
    expect(Object.keys(d.evaluated_rules)).toEqual(ALL.slice(0, 4));
  });

  // Each rule alone, at each boundary: [name, state, reason, index in the order, applies at step]
  const cases: [string, Partial<GuardSnapshot>, string, number, boolean][] = [
    ['kill switch', { killSwitchActive: true }, 'KILL_SWITCH_ACTIVE', 0, true],
    ['user blocked', { userBlocked: true }, 'USER_BLOCKED', 1, true],
    [
      'workspace budget reached',
      { workspaceDailyBudgetMicros: 100, workspaceDailySpendMicros: 100 },
      'WORKSPACE_DAILY_BUDGET_EXCEEDED',
      2,
      true,
    ],
    ['workspace budget zero', { workspaceDailyBudgetMicros: 0 }, 'WORKSPACE_DAILY_BUDGET_EXCEEDED', 2, true],
    [
      'user budget exceeded',
      { userDailyBudgetMicros: 100, userDailySpendMicros: 150 },
      'USER_DAILY_BUDGET_EXCEEDED',
      3,
      true,
    ],
    ['monthly limit reached', { monthlyRunLimit: 10, monthlyRuns: 10 }, 'MONTHLY_RUN_LIMIT_EXCEEDED', 4, false],
    ['concurrency reached', { maxConcurrentRuns: 5, concurrentRuns: 5 }, 'MAX_CONCURRENT_RUNS_EXCEEDED', 5, false],
  ];

  for (const [name, state, reason, index, atStep] of cases) {
    for (const boundary of ['run_start', 'step'] as Boundary[]) {
      const denies = boundary === 'run_start' || atStep;
      it(`when ${name}, then a ${boundary} is ${denies ? `denied with ${reason}` : 'allowed'}`, () => {
        const d = evaluate(boundary, { ...open, ...state });
        if (!denies) {
          expect(d.outcome).toBe('ALLOW');
          return;
        }
        expect(d.outcome).toBe('DENY');
        expect(d.reason).toBe(reason);
        // Rules before the denying one passed; nothing after it was evaluated.
        expect(d.evaluated_rules).toEqual({
          ...Object.fromEntries(ALL.slice(0, index).map((k) => [k, 'PASS'])),
          [ALL[index]!]: 'DENY',
        });
      });
    }
  }

  it('when a budget is one microdollar short, then it passes', () => {
    expect(evaluate('step', { ...open, workspaceDailyBudgetMicros: 100, workspaceDailySpendMicros: 99 }).outcome).toBe(
      'ALLOW',
    );
    expect(evaluate('run_start', { ...open, maxConcurrentRuns: 5, concurrentRuns: 4 }).outcome).toBe('ALLOW');
  });

  it('when every rule would deny, then the first one wins and stops evaluation', () => {
    const everything: GuardSnapshot = {
      killSwitchActive: true,
      userBlocked: true,
      workspaceDailyBudgetMicros: 0,
      workspaceDailySpendMicros: 1,
      userDailyBudgetMicros: 0,
      userDailySpendMicros: 1,
      monthlyRunLimit: 0,
      monthlyRuns: 1,
      maxConcurrentRuns: 0,
      concurrentRuns: 1,
    };
    expect(evaluate('run_start', everything)).toEqual({
      outcome: 'DENY',
      reason: 'KILL_SWITCH_ACTIVE',
      evaluated_rules: { kill_switch: 'DENY' },
      detail: { kill_switch_active: true },
    });
    expect(evaluate('run_start', { ...everything, killSwitchActive: false }).reason).toBe('USER_BLOCKED');
    expect(
      evaluate('run_start', { ...everything, killSwitchActive: false, userBlocked: false }).evaluated_rules,
    ).toEqual({
      kill_switch: 'PASS',
      user_blocked: 'PASS',
      workspace_daily_budget: 'DENY',
    });
  });
});

describe('denial detail', () => {
  const base: GuardSnapshot = {
    ...open,
    dayResetsAt: '2026-11-27T00:00:00Z',
    monthResetsAt: '2026-12-01T00:00:00Z',
  };

  it('when a user budget denies, then the detail has its spend, budget, reservations and reset, and the sentence says them', () => {
    const d = evaluate('step', {
      ...base,
      userDailyBudgetMicros: 400,
      userDailySpendMicros: 450,
      userReservedMicros: 0,
    });
    expect(d.detail).toEqual({
      spend_usd: 0.00045,
      budget_usd: 0.0004,
      reserved_usd: 0,
      resets_at: '2026-11-27T00:00:00Z',
    });
    expect(explainDenial(d.reason!, d.detail)).toBe(
      'user daily budget spent: $0.00045 of $0.0004; resets 2026-11-27T00:00:00Z',
    );
  });

  it('when the monthly limit or concurrency denies, then the detail has the counts', () => {
    expect(evaluate('run_start', { ...base, monthlyRunLimit: 3, monthlyRuns: 3 }).detail).toEqual({
      runs: 3,
      limit: 3,
      resets_at: '2026-12-01T00:00:00Z',
    });
    expect(evaluate('run_start', { ...base, maxConcurrentRuns: 2, concurrentRuns: 2 }).detail).toEqual({
      running: 2,
      limit: 2,
    });
  });

  it('when the decision allows, then it has no detail', () => {
    expect(evaluate('run_start', base)).not.toHaveProperty('detail');
  });
});
