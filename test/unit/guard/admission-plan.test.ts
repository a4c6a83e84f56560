/**
 * The write path of a run start or a step, chosen without a database: every combination of what
 * the choice depends on, and the strategy each gets.
 */
import { describe, expect, it } from 'vitest';
import { planAdmission, type AdmissionPlan, type AdmissionSubject } from '../../../src/guard/admission-plan.js';
import type { GuardState, RunLimitValues, WorkspaceRow } from '../../../src/store/workspaces.js';

function stateWith(options: { runLimit: boolean; rate: boolean; reserve: boolean }): GuardState {
  const workspace = {
    id: 'w',
    name: 'w',
    plan: 'free',
    kill_switch_active: false,
    daily_budget_micros: options.reserve ? 5_000_000 : null,
    user_daily_budget_micros: null,
    monthly_run_limit: options.runLimit ? 100 : null,
    max_concurrent_runs: null,
    retention_days: null,
    unpriced_models: 'allow',
    budget_mode: options.reserve ? 'reserve' : 'spend',
    default_step_reservation_micros: 0,
    run_max_steps: null,
    run_max_cost_micros: null,
    run_max_identical_calls: null,
    user_steps_per_minute: options.rate ? 60 : null,
    time_zone: 'UTC',
    tool_policy: null,
    updated_at: new Date(0),
  } as WorkspaceRow;
  return { workspace, budgets: [], userBlocked: false, userDailyBudgetMicros: null };
}

const RUN_LIMITS: RunLimitValues = { maxSteps: 10, maxCostMicros: null, maxIdenticalCalls: null };
const RUN_COST_LIMIT: RunLimitValues = { maxSteps: null, maxCostMicros: 1_000_000, maxIdenticalCalls: null };

interface Row {
  subject: AdmissionSubject;
  runLimit: boolean;
  runLimits: RunLimitValues | null;
  rate: boolean;
  reserve: boolean;
  estimate: number | null;
  idempotent: boolean;
}

const subjects: AdmissionSubject[] = ['run', 'run_with_step', 'step'];
const rows: Row[] = [];
for (const subject of subjects)
  for (const runLimit of [false, true])
    for (const runLimits of [null, RUN_LIMITS, RUN_COST_LIMIT])
      for (const rate of [false, true])
        for (const reserve of [false, true])
          for (const estimate of [null, 0, 2_000])
            for (const idempotent of [false, true])
              rows.push({ subject, runLimit, runLimits, rate, reserve, estimate, idempotent });

/** The rules, spelled out independently of the implementation. */
function expected(row: Row): AdmissionPlan['kind'] {
  const countsRuns = row.subject !== 'step' && row.runLimit;
  const runLock = row.subject === 'step' && row.runLimits !== null;
  const rate = row.subject !== 'run' && row.rate;
  if (countsRuns || runLock || rate) return 'guarded';
  const reserving = row.subject !== 'run' && row.reserve && (row.estimate ?? 0) > 0;
  if (row.idempotent || reserving) return 'own_transaction';
  return 'batched';
}

function plan(row: Row): AdmissionPlan {
  return planAdmission({
    subject: row.subject,
    state: stateWith(row),
    runLimits: row.subject === 'step' ? row.runLimits : null,
    // A run started alone has no call: no estimate.
    estimateMicros: row.subject === 'run' ? null : row.estimate,
    idempotent: row.idempotent,
  });
}

describe('planAdmission', () => {
  it.each(rows)('when %o, then its write path is as the rules say', (row) => {
    const chosen = plan(row);
    expect(chosen.kind).toBe(expected(row));
    expect(chosen.readsReservations).toBe(row.reserve);
    if (chosen.kind === 'batched') return;
    expect(chosen.locks.admission).toBe(row.subject !== 'step' && row.runLimit);
    expect(chosen.locks.reservation).toBe(row.subject !== 'run' && row.reserve && (row.estimate ?? 0) > 0);
    expect(chosen.locks.run).toEqual(
      row.subject === 'step' && row.runLimits
        ? { withReservations: row.reserve && row.runLimits.maxCostMicros !== null }
        : null,
    );
    expect(chosen.remember).toBe(row.idempotent);
    if (chosen.kind === 'guarded')
      expect(chosen.rateSlot).toEqual(row.subject !== 'run' && row.rate ? { limit: 60 } : null);
  });

  it('when nothing but the day budgets applies, then a step and a proxied run start are batched', () => {
    const plain = { runLimit: false, rate: false, reserve: false };
    const state = stateWith(plain);
    for (const subject of subjects)
      expect(planAdmission({ subject, state, runLimits: null, estimateMicros: 1_000, idempotent: false })).toEqual({
        kind: 'batched',
        readsReservations: false,
      });
  });

  it('when a step reserves against a budget in a run with a cost limit, then it takes the run lock, then the reservation lock', () => {
    const state = stateWith({ runLimit: false, rate: false, reserve: true });
    expect(
      planAdmission({ subject: 'step', state, runLimits: RUN_COST_LIMIT, estimateMicros: 5, idempotent: false }),
    ).toEqual({
      kind: 'guarded',
      readsReservations: true,
      locks: { admission: false, run: { withReservations: true }, reservation: true },
      rateSlot: null,
      remember: false,
    });
  });

  it('when a run starts alone in a workspace with a user rate, then no place in the window is taken', () => {
    const state = stateWith({ runLimit: false, rate: true, reserve: false });
    expect(
      planAdmission({ subject: 'run', state, runLimits: null, estimateMicros: null, idempotent: false }).kind,
    ).toBe('batched');
  });
});
