/**
 * A decision and a written step mapped to the wire's values (src/contract/), which the run API's
 * use cases answer with and the routes send as they are.
 */
import type { StepCreated } from '../contract/runs.js';
import type { Decision } from '../rules/engine.js';
import type { NewStep } from '../store/runs.js';

export const view = (decision: Decision): Decision =>
  decision.detail
    ? {
        outcome: decision.outcome,
        reason: decision.reason,
        evaluated_rules: decision.evaluated_rules,
        detail: decision.detail,
      }
    : { outcome: decision.outcome, reason: decision.reason, evaluated_rules: decision.evaluated_rules };

/** A step as its creation answers it. */
export const createdView = (step: NewStep): StepCreated => ({
  id: step.id,
  run_id: step.runId,
  sequence: step.sequence,
  status: step.status,
  decision: view(step.decision),
});
