/**
 * A step as the run API's checks take it: from the API's body, or from a proxied call.
 */
import type { CallBounds } from '../money/call-estimate.js';
import type { StepType } from '../store/runs.js';

export interface StepInput {
  type: StepType;
  /** Omitted: the server assigns the run's next sequence (proxy mode). */
  sequence?: number | null;
  model?: string | null;
  tool_name?: string | null;
  input_data?: unknown;
  /** A proxied model call's request, as far as it bounds the call's cost (the proxy reads it). */
  bounds?: CallBounds | null;
  /** The caller's own bound of the step's cost (an API step's `max_cost_usd`). */
  max_cost_usd?: number | null;
  /**
   * This daemon forwards the call and records its result itself (the proxy): the step is this
   * daemon instance's until then, and ended RESULT_LOST by another if this one dies first.
   */
  forwarded?: boolean;
  /**
   * What the loop rule (repeated_calls) compares when not `input_data`: a proxied call's whole
   * request body, where its `input_data` is only a summary of it.
   */
  loopInput?: unknown;
}
