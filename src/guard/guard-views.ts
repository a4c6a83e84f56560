/**
 * What the run API's use cases answer: the wire's values (src/contract/), which the routes send
 * as they are, and the mapping of a decision and a written step to them.
 */
import type { RunCreated, RunEnded, StepCreated, StepUpdated } from '../contract/runs.js';
import type { Decision } from '../rules/engine.js';
import type { NewStep } from '../store/runs.js';

export type DecisionView = Decision;
export type StartedRun = RunCreated;
export type CreatedStep = StepCreated;
export type EndedRunView = RunEnded;
export type FinishedStepView = StepUpdated;

export const view = (decision: Decision): DecisionView =>
  decision.detail
    ? {
        outcome: decision.outcome,
        reason: decision.reason,
        evaluated_rules: decision.evaluated_rules,
        detail: decision.detail,
      }
    : { outcome: decision.outcome, reason: decision.reason, evaluated_rules: decision.evaluated_rules };

/** A step as its creation answers it. */
export const createdView = (step: NewStep): CreatedStep => ({
  id: step.id,
  run_id: step.runId,
  sequence: step.sequence,
  status: step.status,
  decision: view(step.decision),
});
