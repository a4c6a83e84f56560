/**
 * What the runaway rules (8 to 11) read, gathered for the pure engine: a run's limits, fixed at
 * its start from the workspace's defaults and the run's own, and the inputs each rule compares.
 */
import { createHash } from 'node:crypto';
import type { RunLimits, RunLimitsRequest } from '../contract/runs.js';
import { microsToUsd, usdToMicros } from '../money/decimal.js';
import type { GuardSnapshot } from '../rules/engine.js';
import type { RunUsage } from '../store/run-usage.js';
import { STEP_RATE_WINDOW_MS, type StepSlot } from '../store/counters/step-rate.js';
import type { RunLimitValues, WorkspaceRow } from '../store/workspaces.js';
import type { StepInput } from './step-input.js';

/** The tighter of two limits, where null is none. */
const tighter = (first: number | null, second: number | null): number | null =>
  first === null ? second : second === null ? first : Math.min(first, second);

/**
 * A run's limits: each the tighter of the workspace's default and the run's own. A run may
 * tighten a default, never loosen it: a looser one is clamped to the default (the start's answer
 * and the run detail show what applies). Null when no limit applies.
 */
export function resolveRunLimits(
  workspace: WorkspaceRow,
  requested: RunLimitsRequest | undefined,
): RunLimitValues | null {
  const cost = requested?.max_cost_usd;
  const limits: RunLimitValues = {
    maxSteps: tighter(workspace.run_max_steps, requested?.max_steps ?? null),
    maxCostMicros: tighter(
      workspace.run_max_cost_micros,
      cost === undefined || cost === null ? null : usdToMicros(cost),
    ),
    maxIdenticalCalls: tighter(workspace.run_max_identical_calls, requested?.max_identical_calls ?? null),
  };
  return hasLimit(limits) ? limits : null;
}

export const hasLimit = (limits: RunLimitValues): boolean =>
  limits.maxSteps !== null || limits.maxCostMicros !== null || limits.maxIdenticalCalls !== null;

export function runLimitsView(limits: RunLimitValues | null): RunLimits {
  return {
    max_steps: limits?.maxSteps ?? null,
    max_cost_usd: limits?.maxCostMicros == null ? null : microsToUsd(limits.maxCostMicros),
    max_identical_calls: limits?.maxIdenticalCalls ?? null,
  };
}

/** A run's usage before its first step. */
export const FRESH_RUN: RunUsage = {
  status: 'RUNNING',
  allowedSteps: 0,
  lastCallHash: null,
  identicalCalls: 0,
  costMicros: 0,
  reservedMicros: 0,
};

/**
 * Sets rules 8 to 10's inputs on a step's snapshot (`toSnapshot`), for a run with `limits` and
 * `usage`, where `identicalCalls` were this call. In reserve mode (the snapshot's budget mode)
 * the run's reservations and this step's estimate count against its budget (usage read with its
 * reservations).
 */
export function addRunRuleInputs(
  snapshot: GuardSnapshot,
  limits: RunLimitValues,
  usage: RunUsage,
  identicalCalls: number,
): void {
  const reserve = snapshot.budgetMode === 'reserve';
  if (limits.maxSteps !== null) snapshot.runSteps = { allowed: usage.allowedSteps, limit: limits.maxSteps };
  if (limits.maxCostMicros !== null)
    snapshot.runCost = {
      costMicros: usage.costMicros,
      reservedMicros: reserve ? usage.reservedMicros : 0,
      limitMicros: limits.maxCostMicros,
      estimateMicros: reserve ? snapshot.estimateMicros : undefined,
    };
  if (limits.maxIdenticalCalls !== null) snapshot.repeatedCalls = { identicalCalls, limit: limits.maxIdenticalCalls };
}

/** Rule 11's input from the window's answer; a place frees when its oldest step leaves it. */
export function userRateInput(slot: StepSlot, limit: number, nowMs: number): NonNullable<GuardSnapshot['userRate']> {
  const freesAtMs = (slot.oldestAtMs ?? nowMs) + STEP_RATE_WINDOW_MS;
  const retryAfterSeconds = Math.max(1, Math.ceil((freesAtMs - nowMs) / 1000));
  return {
    stepsInWindow: slot.stepsInWindow,
    limit,
    windowSeconds: STEP_RATE_WINDOW_MS / 1000,
    retryAfterSeconds,
    retryAt: new Date(nowMs + retryAfterSeconds * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z'),
  };
}

/**
 * What makes two calls the same for the loop rule: their type, model or tool, and input, as the
 * SHA-256 of a canonical JSON (object keys sorted at every depth, so key order does not matter).
 */
export function callHash(call: {
  type: string;
  model?: string | null;
  tool_name?: string | null;
  input: unknown;
}): string {
  return createHash('sha256')
    .update(canonicalJson([call.type, call.model ?? null, call.tool_name ?? null, call.input ?? null]))
    .digest('base64url');
}

/** The loop rule's hash of a call, where the run has the rule. */
export const loopHash = (limits: RunLimitValues | null, input: Omit<StepInput, 'sequence'>): string | null =>
  limits?.maxIdenticalCalls == null
    ? null
    : callHash({
        type: input.type,
        model: input.model,
        tool_name: input.tool_name,
        input: input.loopInput !== undefined ? input.loopInput : input.input_data,
      });

/** JSON with every object's keys sorted; what JSON.stringify drops (undefined, functions) it drops too. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value))
    return `[${value.map((item) => canonicalJson(item === undefined ? null : item)).join(',')}]`;
  if (value !== null && typeof value === 'object' && !(value instanceof Date)) {
    const entries = Object.keys(value)
      .sort()
      .filter((key) => (value as Record<string, unknown>)[key] !== undefined)
      .map((key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}
