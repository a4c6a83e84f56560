import type { GuardSnapshot } from '../../src/rules/engine.js';

/**
 * What the rules see for a workspace where every rule passes: no kill switch, nobody blocked, no
 * budget or limit set, nothing spent or running. Tests spread it and set only what they are about.
 */
export const OPEN_SNAPSHOT: Readonly<GuardSnapshot> = {
  killSwitchActive: false,
  userBlocked: false,
  workspaceDailyBudgetMicros: null,
  workspaceDailySpendMicros: 0,
  userDailyBudgetMicros: null,
  userDailySpendMicros: 0,
  monthlyRunLimit: null,
  monthlyRuns: 0,
  maxConcurrentRuns: null,
  concurrentRuns: 0,
};
