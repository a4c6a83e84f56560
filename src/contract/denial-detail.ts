/**
 * The numbers that explain a denial, and their sentence: once, for the rule engine, the proxy's
 * 403 message, the CLI and the SDK. No imports: the SDK loads it at run time.
 */

/** A DENY's numbers (USD as JSON numbers). An ALLOW has none. */
export type DenialDetail =
  | { spend_usd: number; budget_usd: number; reserved_usd: number; resets_at: string | null }
  | { runs: number; limit: number; resets_at: string | null }
  | { running: number; limit: number }
  | { kill_switch_active: true }
  | { user_blocked: true }
  | { model: string | null; unpriced_models: 'deny' };

const WHAT: Readonly<Record<string, string>> = {
  KILL_SWITCH_ACTIVE: 'the workspace kill switch is active',
  USER_BLOCKED: 'this user is blocked',
  WORKSPACE_DAILY_BUDGET_EXCEEDED: 'workspace daily budget spent',
  USER_DAILY_BUDGET_EXCEEDED: 'user daily budget spent',
  MONTHLY_RUN_LIMIT_EXCEEDED: 'monthly run limit reached',
  MAX_CONCURRENT_RUNS_EXCEEDED: 'concurrent run limit reached',
  MODEL_NOT_PRICED: 'model has no active price (unpriced_models is "deny")',
};

/**
 * A denial's numbers in words: `user daily budget spent: $0.00045 of $0.0004; resets
 * 2026-11-27T00:00:00Z`. Without a detail (a decision stored before details), the reason alone.
 */
export function explainDenial(
  reason: string,
  detail: DenialDetail | Record<string, unknown> | undefined | null,
): string {
  const what = WHAT[reason] ?? reason;
  if (!detail) return what;
  const d = detail as Record<string, unknown>;
  const resets = typeof d.resets_at === 'string' ? `; resets ${d.resets_at}` : '';
  if (typeof d.spend_usd === 'number') {
    const reserved = typeof d.reserved_usd === 'number' && d.reserved_usd > 0 ? ` (+ $${d.reserved_usd} reserved)` : '';
    return `${what}: $${d.spend_usd}${reserved} of $${String(d.budget_usd)}${resets}`;
  }
  if (typeof d.runs === 'number') return `${what}: ${d.runs} of ${String(d.limit)} runs this month${resets}`;
  if (typeof d.running === 'number') return `${what}: ${d.running} of ${String(d.limit)} runs running`;
  if (d.unpriced_models === 'deny')
    return `${what}: ${typeof d.model === 'string' ? JSON.stringify(d.model) : 'the model could not be read'}`;
  return what;
}
