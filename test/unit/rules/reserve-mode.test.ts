/** Rules 3 and 4 in `budget_mode: "reserve"` (issue #34, part 3): spend + reservations + this estimate. */
import { describe, expect, it } from 'vitest';
import { evaluate, type GuardSnapshot } from '../../../src/rules/engine.js';
import { OPEN_SNAPSHOT } from '../../support/guard-snapshot.js';

const base: GuardSnapshot = {
  ...OPEN_SNAPSHOT,
  workspaceDailyBudgetMicros: 1_000,
  workspaceDailySpendMicros: 400,
  workspaceReservedMicros: 300,
  userReservedMicros: 0,
};

describe('reserve mode', () => {
  it.each([
    // [estimate, outcome]: 400 spent + 300 reserved + estimate against 1,000
    [300, 'ALLOW'],
    [301, 'DENY'],
    [0, 'ALLOW'],
  ] as const)('when the estimate is %i, then the step is %s', (estimate, outcome) => {
    const decision = evaluate('step', { ...base, budgetMode: 'reserve', estimateMicros: estimate });
    expect(decision.outcome).toBe(outcome);
    if (outcome === 'DENY') {
      expect(decision.reason).toBe('WORKSPACE_DAILY_BUDGET_EXCEEDED');
      expect(decision.detail).toMatchObject({ spend_usd: 0.0004, budget_usd: 0.001, reserved_usd: 0.0003 });
    }
  });

  it('when spend and reservations reach the budget, then even a step without an estimate is denied', () => {
    const full = { ...base, workspaceReservedMicros: 600, budgetMode: 'reserve' as const, estimateMicros: 0 };
    expect(evaluate('step', full).outcome).toBe('DENY');
  });

  it('when the user budget would be passed by the estimate, then rule 4 denies', () => {
    const user = { ...base, userDailyBudgetMicros: 100, userDailySpendMicros: 50, userReservedMicros: 40 };
    const decision = evaluate('step', { ...user, budgetMode: 'reserve', estimateMicros: 11 });
    expect(decision.reason).toBe('USER_DAILY_BUDGET_EXCEEDED');
    expect(decision.detail).toMatchObject({ reserved_usd: 0.00004 });
  });

  it('when the mode is spend, then reservations and the estimate change nothing', () => {
    expect(evaluate('step', { ...base, workspaceReservedMicros: 5_000, estimateMicros: 5_000 }).outcome).toBe('ALLOW');
  });
});
