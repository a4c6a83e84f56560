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
  | { model: string | null; unpriced_models: 'deny' }
  /** run_step_limit: steps the run was allowed so far (denied ones do not count), and its max_steps. */
  | { steps: number; limit: number }
  /** run_budget: the run's recorded cost, its outstanding reservations (reserve mode), its max_cost_usd. */
  | { run_cost_usd: number; reserved_usd: number; limit_usd: number }
  /** repeated_calls: identical calls in a row just before this one, and max_identical_calls. */
  | { identical_calls: number; limit: number }
  /** user_rate: the user's steps in the last `window_s` seconds, the limit, and when a place frees. */
  | { steps_in_window: number; limit: number; window_s: number; retry_after_s: number; retry_at: string }
  /** tool_allowed: the tool (`{server}.{tool}`) and the deny pattern it matched; null: not in the allow list. */
  | { tool: string; pattern: string | null }
  /** budgets (rule 13): the budget detail, and which budget it is. */
  | {
      spend_usd: number;
      budget_usd: number;
      reserved_usd: number;
      resets_at: string | null;
      budget_id: string;
      scope: 'workspace' | 'user' | 'key' | 'tag';
      subject: string | null;
      period: 'day' | 'week' | 'month';
    };

const WHAT: Readonly<Record<string, string>> = {
  KILL_SWITCH_ACTIVE: 'the workspace kill switch is active',
  USER_BLOCKED: 'this user is blocked',
  WORKSPACE_DAILY_BUDGET_EXCEEDED: 'workspace daily budget spent',
  USER_DAILY_BUDGET_EXCEEDED: 'user daily budget spent',
  MONTHLY_RUN_LIMIT_EXCEEDED: 'monthly run limit reached',
  MAX_CONCURRENT_RUNS_EXCEEDED: 'concurrent run limit reached',
  MODEL_NOT_PRICED: 'model has no active price (unpriced_models is "deny")',
  RUN_STEP_LIMIT_EXCEEDED: 'run step limit reached',
  RUN_BUDGET_EXCEEDED: 'run budget spent',
  REPEATED_CALL_LOOP: 'the same call repeated in a loop',
  USER_RATE_LIMITED: 'user step rate limit reached',
  TOOL_NOT_ALLOWED: "tool not allowed by the workspace's tool policy",
  BUDGET_EXCEEDED: 'budget spent',
};

const PERIOD_WORDS: Readonly<Record<string, string>> = { day: 'daily', week: 'weekly', month: 'monthly' };

/** Which budget of `/v1/budgets` a detail names: `tag project:search monthly budget spent`. */
function budgetWhat(fields: Record<string, unknown>): string | null {
  if (typeof fields.budget_id !== 'string') return null;
  const subject = typeof fields.subject === 'string' ? ` ${fields.subject}` : '';
  const period = String(fields.period);
  return `${String(fields.scope)}${subject} ${PERIOD_WORDS[period] ?? period} budget spent`;
}

/**
 * A denial's numbers in words: `user daily budget spent: $0.00045 of $0.0004; resets
 * 2026-11-27T00:00:00Z`. Without a detail (a decision stored before details), the reason alone.
 */
export function explainDenial(
  reason: string,
  detail: DenialDetail | Record<string, unknown> | undefined | null,
): string {
  if (!detail) return WHAT[reason] ?? reason;
  const fields = detail as Record<string, unknown>;
  const what = budgetWhat(fields) ?? WHAT[reason] ?? reason;
  const resets = typeof fields.resets_at === 'string' ? `; resets ${fields.resets_at}` : '';
  if (typeof fields.spend_usd === 'number') {
    const reserved =
      typeof fields.reserved_usd === 'number' && fields.reserved_usd > 0 ? ` (+ $${fields.reserved_usd} reserved)` : '';
    return `${what}: $${fields.spend_usd}${reserved} of $${String(fields.budget_usd)}${resets}`;
  }
  if (typeof fields.runs === 'number')
    return `${what}: ${fields.runs} of ${String(fields.limit)} runs this month${resets}`;
  if (typeof fields.running === 'number') return `${what}: ${fields.running} of ${String(fields.limit)} runs running`;
  if (typeof fields.run_cost_usd === 'number') {
    const reserved =
      typeof fields.reserved_usd === 'number' && fields.reserved_usd > 0 ? ` (+ $${fields.reserved_usd} reserved)` : '';
    return `${what}: $${fields.run_cost_usd}${reserved} of $${String(fields.limit_usd)}`;
  }
  if (typeof fields.identical_calls === 'number')
    return `${what}: ${fields.identical_calls} identical calls in a row, the limit is ${String(fields.limit)}`;
  if (typeof fields.steps_in_window === 'number')
    return `${what}: ${fields.steps_in_window} of ${String(fields.limit)} steps in ${String(fields.window_s)} s; retry after ${String(fields.retry_after_s)} s (${String(fields.retry_at)})`;
  if (typeof fields.steps === 'number') return `${what}: ${fields.steps} of ${String(fields.limit)} steps`;
  if (typeof fields.tool === 'string')
    return typeof fields.pattern === 'string'
      ? `${what}: ${JSON.stringify(fields.tool)} matches the deny pattern ${JSON.stringify(fields.pattern)}`
      : `${what}: ${JSON.stringify(fields.tool)} is not in the allow list`;
  if (fields.unpriced_models === 'deny')
    return `${what}: ${typeof fields.model === 'string' ? JSON.stringify(fields.model) : 'the model could not be read'}`;
  return what;
}
