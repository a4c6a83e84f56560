/** Exact percentiles over raw samples (milliseconds, sub-millisecond resolution). */

export interface LatencySummary {
  count: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** Nearest-rank percentile of sorted samples. */
function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function summarize(samples: readonly number[]): LatencySummary {
  const sorted = Float64Array.from(samples).sort();
  const sum = sorted.reduce((a, b) => a + b, 0);
  return {
    count: sorted.length,
    mean: sorted.length ? sum / sorted.length : NaN,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted.length ? sorted[sorted.length - 1]! : NaN,
  };
}

/** Mean milliseconds per call of `run`, called `n` times back to back (for in-process micro-measures). */
export function msPerCall(run: () => unknown, n: number): number {
  const started = performance.now();
  for (let i = 0; i < n; i++) run();
  return (performance.now() - started) / n;
}

export const round = (n: number, digits = 2): number => (Number.isFinite(n) ? Number(n.toFixed(digits)) : n);

export function ratio(value: number, baseline: number): number {
  return baseline > 0 && Number.isFinite(value) ? round(value / baseline, 3) : NaN;
}
