/** Model calls that used tokens but have no price: their cost is unknown, not $0. */
import type { Step } from './api-client.js';

export function unpricedCalls(steps: readonly Step[]): Step[] {
  return steps.filter(
    (step) =>
      step.type === 'MODEL_CALL' &&
      step.cost_usd === null &&
      (step.prompt_tokens !== null || step.completion_tokens !== null),
  );
}

/** A cost with its unpriced calls: `$0.0012 + 2 unpriced calls`, or the cost alone when none. */
export function costWithUnpriced(cost: string, unpriced: number): string {
  return unpriced === 0 ? cost : `${cost} + ${unpriced} unpriced call${unpriced === 1 ? '' : 's'}`;
}
