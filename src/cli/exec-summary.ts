/**
 * The line `runguard exec` prints to stderr when its run is over: the run, its status, its calls,
 * tokens and cost, and what was denied, so a guarded command never ends in silence.
 */
import { explainDenial, type DenialDetail } from '../contract/denial-detail.js';
import type { RunDetail } from './api-client.js';
import { duration, usd } from './output.js';
import { createStyle, statusWord, type Style } from './style.js';
import { costWithUnpriced, unpricedCalls } from './unpriced.js';

const plain = createStyle(false);

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

export function execSummary(run: RunDetail, exitStatus: number, style: Style = plain): string {
  const denied = run.steps.filter((step) => step.status === 'BLOCKED');
  // Each reason once, with the numbers of its last denial: `RUN_STEP_LIMIT_EXCEEDED: run step limit reached: 20 of 20 steps`.
  const lastDenial = new Map(denied.map((step) => [step.decision.reason ?? 'DENY', step.decision.detail] as const));
  // Calls that failed on their way (an unreachable upstream): what the proxy told the agent.
  const failed = run.steps.flatMap((step) => {
    const output = step.output_data as { error?: unknown; detail?: unknown } | null;
    if (step.status !== 'FAILED' || typeof output?.error !== 'string') return [];
    return [typeof output.detail === 'string' ? `${output.error}: ${output.detail}` : output.error];
  });
  const reasons = [...lastDenial].map(([reason, detail]) =>
    detail ? `${reason}: ${explainDenial(reason, detail)}` : reason,
  );
  const parts = [
    plural(run.steps.length, 'call'),
    plural(run.total_tokens, 'token'),
    costWithUnpriced(usd(run.total_cost_usd), unpricedCalls(run.steps).length),
    ...(denied.length > 0 ? [style.bad(`${denied.length} denied (${reasons.join('; ')})`)] : []),
    ...(failed.length > 0 ? [style.bad(`${failed.length} failed (${[...new Set(failed)].join('; ')})`)] : []),
  ];
  const status = statusWord(style, run.status === 'FAILED' ? `FAILED (exit ${exitStatus})` : run.status);
  return `runguard: run ${run.id} ${status} in ${duration(run.duration_ms)}: ${parts.join(', ')}\n`;
}

/** A blocked start: the command never ran. */
export function blockedSummary(
  runId: string,
  reason: string | null,
  style: Style = plain,
  detail?: DenialDetail | Record<string, unknown> | null,
): string {
  // The numbers behind the denial, when the daemon sent them: `user daily budget spent: $... of $...; resets ...`.
  const numbers = reason && detail ? `: ${explainDenial(reason, detail)}` : '';
  return `runguard: run ${runId} ${style.bad(`BLOCKED (${reason ?? 'DENY'}${numbers})`)}; the command was not started.\n`;
}
