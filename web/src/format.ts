/** How numbers, money and times are shown. */
import type { Step } from './api';

const usdFormat = new Intl.NumberFormat('en-US', {
  style: 'currency',
  currency: 'USD',
  minimumFractionDigits: 2,
  maximumFractionDigits: 6,
});
const intFormat = new Intl.NumberFormat('en-US');

export const usd = (value: number | null | undefined): string =>
  value === null || value === undefined ? '—' : usdFormat.format(value);
export const int = (value: number | null | undefined): string =>
  value === null || value === undefined ? '—' : intFormat.format(value);
/**
 * A run's cost with its model calls that have no price (tokens used, cost unknown, counted as $0):
 * `$0.00 + 2 unpriced`, as the CLI says it; the cost alone when every call was priced.
 */
export const costWithUnpriced = (cost: number, unpriced: number): string =>
  unpriced === 0 ? usd(cost) : `${usd(cost)} + ${int(unpriced)} unpriced`;
/** A model call that used tokens and has no price: its cost is unknown, not $0. */
export const isUnpriced = (step: Pick<Step, 'type' | 'cost_usd' | 'prompt_tokens' | 'completion_tokens'>): boolean =>
  step.type === 'MODEL_CALL' &&
  step.cost_usd === null &&
  (step.prompt_tokens !== null || step.completion_tokens !== null);
export const limit = (value: number | null | undefined, format: (v: number) => string = int): string =>
  value === null || value === undefined ? 'unlimited' : format(value);

export function when(iso: string | null | undefined): string {
  if (!iso) return '—';
  const date = new Date(iso);
  return `${date.toISOString().slice(0, 10)} ${date.toISOString().slice(11, 19)} UTC`;
}

export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const minutes = Math.floor(ms / 60_000);
  return `${minutes} min ${Math.round((ms % 60_000) / 1000)} s`;
}

/** Share of a limit used, 0 to 1; null when unlimited. */
export const share = (used: number, of: number | null): number | null =>
  of === null ? null : of === 0 ? 1 : Math.min(1, used / of);
