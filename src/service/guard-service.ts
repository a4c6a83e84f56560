/**
 * The use cases of the run API, each reading top to bottom as: load state, decide (pure rules),
 * record, update the hot counters, answer. Data flows one way; the HTTP layer only maps.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { ApiError } from '../errors.js';
import { evaluate, type Decision, type GuardSnapshot } from '../rules/engine.js';
import { isUniqueViolation, type Db, type Queryable } from '../store/db.js';
import { scopeAt, type Counters, type CounterStore } from '../store/counters.js';
import { findAnswer, saveAnswer, type IdempotencyClaim } from '../store/idempotency.js';
import * as runs from '../store/runs.js';
import { loadGuardState, loadStepGuardState, type GuardState } from '../store/workspaces.js';

export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

export type Boundary = 'run_start' | 'step';

/**
 * Told about what the service decides, after the decision's record committed (an idempotent
 * replay is not a new decision). Metrics implement it; the service imports no metrics library.
 */
export interface GuardObserver {
  decision(boundary: Boundary, decision: Pick<Decision, 'outcome' | 'reason'>): void;
}

export interface Answer<T> {
  statusCode: number;
  body: T;
}

export interface DecisionView {
  outcome: Decision['outcome'];
  reason: Decision['reason'];
  evaluated_rules: Decision['evaluated_rules'];
}

export interface StartedRun {
  id: string;
  user_id: string;
  status: 'RUNNING' | 'BLOCKED';
  decision: DecisionView;
}

export interface CreatedStep {
  id: string;
  run_id: string;
  sequence: number;
  status: 'ALLOWED' | 'BLOCKED';
  decision: DecisionView;
}

export interface EndedRunView {
  id: string;
  status: runs.RunStatus;
  ended_at: string;
}

export interface FinishedStepView {
  id: string;
  status: runs.StepStatus;
}

export interface StepInput {
  type: runs.StepType;
  /** Omitted: the server assigns the run's next sequence (proxy mode). */
  sequence?: number | null;
  model?: string | null;
  tool_name?: string | null;
  input_data?: unknown;
}

export function toSnapshot(state: GuardState, counters: Counters): GuardSnapshot {
  const w = state.workspace;
  return {
    killSwitchActive: w.kill_switch_active,
    userBlocked: state.userBlocked,
    workspaceDailyBudgetMicros: w.daily_budget_micros,
    workspaceDailySpendMicros: counters.workspaceDailySpendMicros,
    userDailyBudgetMicros: state.userDailyBudgetMicros,
    userDailySpendMicros: counters.userDailySpendMicros,
    monthlyRunLimit: w.monthly_run_limit,
    monthlyRuns: counters.monthlyRuns,
    maxConcurrentRuns: w.max_concurrent_runs,
    concurrentRuns: counters.concurrentRuns,
  };
}

const view = (d: Decision): DecisionView => ({ outcome: d.outcome, reason: d.reason, evaluated_rules: d.evaluated_rules });

/** A concurrent twin of an idempotent request committed first. */
class IdempotencyRace extends Error {}

export class GuardService {
  constructor(
    private readonly db: Db,
    private readonly counters: CounterStore,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly observer: GuardObserver | null = null,
  ) {}

  /** An observer failing must never fail the request it observes. */
  private observe(boundary: Boundary, decision: DecisionView): void {
    try {
      this.observer?.decision(boundary, decision);
    } catch (error) {
      this.log.warn({ err: error }, 'guard observer failed');
    }
  }

  async startRun(
    workspaceId: string,
    input: { user_id: string; metadata?: unknown },
    idempotency?: IdempotencyClaim,
  ): Promise<Answer<StartedRun>> {
    const replay = await this.replay<StartedRun>(idempotency);
    if (replay) return replay;
    const now = this.clock.now();
    const scope = scopeAt(now, workspaceId, input.user_id);
    const [state, counters] = await Promise.all([
      loadGuardState(this.db, workspaceId, input.user_id),
      this.counters.read(scope),
    ]);
    const snapshot = toSnapshot(state, counters);
    let admitted = false;
    try {
      const answer = await this.db.transaction(async (tx) => {
        let decision = evaluate('run_start', snapshot);
        if (decision.outcome === 'ALLOW') {
          const limits = {
            monthlyRunLimit: state.workspace.monthly_run_limit,
            maxConcurrentRuns: state.workspace.max_concurrent_runs,
          };
          const admission = await this.counters.admitRun(tx, scope, limits);
          admitted = admission.admitted;
          // Another start took the last slot since the snapshot: decide again on the fresh counts.
          if (!admitted) decision = evaluate('run_start', { ...snapshot, ...admission });
        }
        const status: StartedRun['status'] = admitted ? 'RUNNING' : 'BLOCKED';
        const id = randomUUID();
        await runs.insertRun(tx, { id, workspaceId, userId: input.user_id, status, metadata: input.metadata ?? null,
          decision, now, day: scope.day });
        const answer = { statusCode: 201, body: { id, user_id: input.user_id, status, decision: view(decision) } };
        await this.remember(tx, idempotency, answer, now);
        return answer;
      });
      this.observe('run_start', answer.body.decision);
      return answer;
    } catch (error) {
      if (admitted) await this.counters.cancelAdmission(scope).catch((e) => this.counterDrift(e, 'cancelAdmission'));
      if (error instanceof IdempotencyRace) return (await this.replay<StartedRun>(idempotency))!;
      throw error;
    }
  }

  async endRun(
    workspaceId: string,
    runId: string,
    status: 'COMPLETED' | 'FAILED',
    idempotency?: IdempotencyClaim,
  ): Promise<Answer<EndedRunView>> {
    const replay = await this.replay<EndedRunView>(idempotency);
    if (replay) return replay;
    const now = this.clock.now();
    const ended = await runs.endRun(this.db, workspaceId, runId, status, now);
    if (!ended) {
      if (await runs.runExists(this.db, workspaceId, runId)) throw new ApiError('RUN_NOT_RUNNING');
      throw new ApiError('RUN_NOT_FOUND');
    }
    await this.counters
      .runEnded(scopeAt(now, workspaceId, ended.user_id))
      .catch((e) => this.counterDrift(e, 'runEnded'));
    const answer = { statusCode: 200, body: { id: ended.id, status: ended.status, ended_at: ended.ended_at.toISOString() } };
    // Remembered after the fact: a retry whose first attempt's answer was lost gets that answer.
    await this.remember(this.db, idempotency, answer, now).catch(() => {});
    return answer;
  }

  async createStep(
    workspaceId: string,
    runId: string,
    input: StepInput,
    idempotency?: IdempotencyClaim,
  ): Promise<Answer<CreatedStep>> {
    const replay = await this.replay<CreatedStep>(idempotency);
    if (replay) return replay;
    const state = await loadStepGuardState(this.db, workspaceId, runId);
    if (!state) throw new ApiError('RUN_NOT_FOUND');
    if (state.runStatus !== 'RUNNING') throw new ApiError('RUN_NOT_RUNNING');
    const now = this.clock.now();
    const counters = await this.counters.read(scopeAt(now, workspaceId, state.userId));
    const decision = evaluate('step', toSnapshot(state, counters));
    const id = randomUUID();
    const record = async (db: Queryable): Promise<Answer<CreatedStep>> => {
      const inserted = await runs.insertStep(db, {
        id, runId, workspaceId, sequence: input.sequence ?? null, type: input.type,
        status: decision.outcome === 'ALLOW' ? 'ALLOWED' : 'BLOCKED',
        model: input.model ?? null, toolName: input.tool_name ?? null, inputData: input.input_data ?? null, decision, now,
      });
      if (!inserted) throw new ApiError('RUN_NOT_RUNNING');
      return {
        statusCode: 201,
        body: { id, run_id: runId, sequence: inserted.sequence, status: decision.outcome === 'ALLOW' ? 'ALLOWED' : 'BLOCKED',
          decision: view(decision) },
      };
    };
    try {
      const answer = idempotency
        ? await this.db.transaction(async (tx) => {
            const recorded = await record(tx);
            await this.remember(tx, idempotency, recorded, now);
            return recorded;
          })
        : await record(this.db);
      this.observe('step', answer.body.decision);
      return answer;
    } catch (error) {
      // A concurrent twin of an idempotent request took the sequence first: answer as it did.
      const twin = error instanceof IdempotencyRace || isUniqueViolation(error, 'steps_run_sequence')
        ? await this.replay<CreatedStep>(idempotency)
        : null;
      if (twin) return twin;
      if (isUniqueViolation(error, 'steps_run_sequence')) throw new ApiError('DUPLICATE_SEQUENCE', undefined, { cause: error });
      throw error;
    }
  }

  async finishStep(
    workspaceId: string,
    runId: string,
    stepId: string,
    result: runs.StepResult,
    idempotency?: IdempotencyClaim,
  ): Promise<Answer<FinishedStepView>> {
    const replay = await this.replay<FinishedStepView>(idempotency);
    if (replay) return replay;
    const now = this.clock.now();
    const scope = scopeAt(now, workspaceId, '');
    const finished = await this.db.transaction((tx) =>
      runs.finishStep(tx, workspaceId, runId, stepId, result, now, scope.day),
    );
    if (!finished) {
      if (await runs.stepExists(this.db, workspaceId, runId, stepId)) throw new ApiError('STEP_ALREADY_FINISHED');
      throw new ApiError('STEP_NOT_FOUND');
    }
    await this.counters
      .spendAdded({ ...scope, userId: finished.user_id }, finished.cost_micros)
      .catch((e) => this.counterDrift(e, 'spendAdded'));
    const answer = { statusCode: 200, body: { id: finished.id, status: finished.status } };
    await this.remember(this.db, idempotency, answer, now).catch(() => {});
    return answer;
  }

  private async replay<T>(claim: IdempotencyClaim | undefined): Promise<Answer<T> | null> {
    if (!claim) return null;
    const stored = await findAnswer(this.db, claim.workspaceId, claim.key, this.clock.now());
    if (!stored) return null;
    if (stored.fingerprint !== claim.fingerprint) throw new ApiError('IDEMPOTENCY_KEY_REUSED');
    return { statusCode: stored.statusCode, body: stored.body as T };
  }

  private async remember(tx: Queryable, claim: IdempotencyClaim | undefined, answer: Answer<unknown>, now: Date) {
    if (claim && !(await saveAnswer(tx, claim, answer.statusCode, answer.body, now))) throw new IdempotencyRace();
  }

  /** The record committed but the hot copy missed the change; the durable counters stay right. */
  private counterDrift(error: unknown, operation: string) {
    this.log.warn({ err: error, operation }, 'counter store update failed; it will be rebuilt from Postgres');
  }
}

