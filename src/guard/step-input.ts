/**
 * A step as the run API's checks take it (from the API's body, or from a proxied call), and what
 * follows from it alone: its model's price as rule model_priced reads it, the bound of its cost,
 * and the record written with its decision.
 */
import { estimateCallMicros, type CallBounds } from '../money/call-estimate.js';
import type { TokenPrices } from '../money/cost.js';
import { usdToMicros } from '../money/decimal.js';
import type { Decision, GuardSnapshot } from '../rules/engine.js';
import { SPEND_CAP_MICROS } from '../store/counters/counters.js';
import type { NewStep, StepType } from '../store/runs.js';
import { timeOrderedId } from '../store/time-ordered-id.js';
import type { GuardState } from '../store/workspaces.js';
import type { GuardContext } from './guard-context.js';

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
  /** A tool call through the MCP proxy: its server and JSON-RPC request id, kept with the step. */
  mcp?: { server: string; request_id: string | number | null } | null;
  /** The API key whose credential makes the step (not on the wire): key budgets count it. */
  apiKeyId?: string | null;
}

/**
 * The active prices of a MODEL_CALL step's model, where its check reads them: for its estimate
 * (a proxied call's bounds) or for rule model_priced; null where nothing reads them. Read once
 * for both, and awaited only when not read yet: every proxied call's check comes here.
 */
export function stepPrices(
  context: GuardContext,
  state: GuardState,
  workspaceId: string,
  input: Omit<StepInput, 'sequence'>,
): TokenPrices | null | Promise<TokenPrices | null> {
  if (input.type !== 'MODEL_CALL' || input.model === undefined || input.model === null) return null;
  const estimated = input.bounds && (input.max_cost_usd === undefined || input.max_cost_usd === null);
  if (!estimated && state.workspace.unpriced_models !== 'deny') return null;
  const known = context.prices.known(workspaceId, input.model);
  return known !== undefined ? known : context.prices.prices(workspaceId, input.model);
}

/**
 * With `unpriced_models: "deny"`, whether a MODEL_CALL step's model has an active price (the
 * rule model_priced; `prices` as `stepPrices` read them); undefined where the rule is not evaluated.
 */
export function modelPricedInput(
  state: GuardState,
  input: Omit<StepInput, 'sequence'>,
  prices: TokenPrices | null,
): GuardSnapshot['modelPriced'] {
  if (input.type !== 'MODEL_CALL' || state.workspace.unpriced_models !== 'deny') return undefined;
  const model = input.model ?? null;
  return { model, priced: model !== null && prices !== null };
}

/** A TOOL_CALL step in a workspace with a tool policy: what rule tool_allowed reads; undefined elsewhere. */
export function toolPolicyInput(state: GuardState, input: Omit<StepInput, 'sequence'>): GuardSnapshot['toolPolicy'] {
  const policy = state.workspace.tool_policy;
  if (input.type !== 'TOOL_CALL' || policy === null) return undefined;
  return { tool: input.tool_name ?? null, policy };
}

/**
 * The upper bound of a step's cost, in microdollars, stored with the step: the caller's own
 * (`max_cost_usd`), or a proxied model call's, estimated from its request and its model's active
 * prices (`prices`, as `stepPrices` read them; none for an unpriced model: its cost is unknown).
 * Null: no bound is known.
 */
export function stepEstimate(
  state: GuardState,
  input: Omit<StepInput, 'sequence'>,
  prices: TokenPrices | null,
): number | null {
  if (input.max_cost_usd !== undefined && input.max_cost_usd !== null) return usdToMicros(input.max_cost_usd);
  if (input.type !== 'MODEL_CALL') return null;
  const model = input.model ?? null;
  if (input.bounds) {
    if (model === null) return null;
    return prices ? estimateCallMicros(input.bounds, model, prices, SPEND_CAP_MICROS) : null;
  }
  // An API step says nothing of its size: in reserve mode it reserves the workspace's default.
  return state.workspace.budget_mode === 'reserve' ? state.workspace.default_step_reservation_micros : null;
}

export function newStep(
  context: GuardContext,
  workspaceId: string,
  runId: string,
  sequence: number,
  input: Omit<StepInput, 'sequence'>,
  decision: Decision,
  now: Date,
  estimateMicros: number | null,
  id = timeOrderedId(now.getTime()),
): NewStep {
  return {
    id,
    runId,
    workspaceId,
    sequence,
    type: input.type,
    status: decision.outcome === 'ALLOW' ? 'ALLOWED' : 'BLOCKED',
    model: input.model ?? null,
    toolName: input.tool_name ?? null,
    inputData: input.input_data ?? null,
    decision,
    now,
    estimateMicros,
    daemonId: input.forwarded && decision.outcome === 'ALLOW' ? (context.instance?.id ?? null) : null,
    mcp: input.mcp ?? null,
    apiKeyId: input.apiKeyId ?? null,
  };
}
