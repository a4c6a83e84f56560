/**
 * The workspace settings the Settings page edits: one row per field of GET/PATCH /v1/workspace.
 * A setting added to the API is one row here. A row whose key the API does not answer with is not
 * shown, so rows for settings other branches add can be listed before their API has them.
 */
export type SettingField =
  | { key: string; label: string; help: string; kind: 'text' }
  | { key: string; label: string; help: string; kind: 'usd' | 'integer'; nullable: true }
  | { key: string; label: string; help: string; kind: 'choice'; options: { value: string; label: string }[] };

export const WORKSPACE_FIELDS: SettingField[] = [
  { key: 'name', label: 'Workspace name', help: '', kind: 'text' },
  {
    key: 'daily_budget_usd',
    label: 'Workspace daily budget (USD)',
    help: 'Spend per UTC day across all users. Empty: unlimited.',
    kind: 'usd',
    nullable: true,
  },
  {
    key: 'user_daily_budget_usd',
    label: 'Default daily budget per user (USD)',
    help: 'Applies to users without a budget of their own. Empty: unlimited.',
    kind: 'usd',
    nullable: true,
  },
  {
    key: 'monthly_run_limit',
    label: 'Monthly run limit',
    help: 'Allowed run starts per UTC month, up to the plan’s ceiling. Empty: unlimited (only where the plan has no ceiling).',
    kind: 'integer',
    nullable: true,
  },
  {
    key: 'max_concurrent_runs',
    label: 'Maximum concurrent runs',
    help: 'Runs RUNNING at once, up to the plan’s ceiling. Empty: unlimited (only where the plan has no ceiling).',
    kind: 'integer',
    nullable: true,
  },
  {
    key: 'budget_mode',
    label: 'Budget mode',
    help: 'Spend: deny once spend reaches a budget. Reserve: also count calls in flight and this call’s estimate.',
    kind: 'choice',
    options: [
      { value: 'spend', label: 'Spend so far' },
      { value: 'reserve', label: 'Reserve before each call' },
    ],
  },
  {
    key: 'default_step_reservation_usd',
    label: 'Default step reservation (USD)',
    help: 'Reserve mode: what an SDK/API step without max_cost_usd reserves. Empty: the default, $0.05.',
    kind: 'usd',
    nullable: true,
  },
  {
    key: 'unpriced_models',
    label: 'Calls to unpriced models',
    help: 'Deny: a model call whose model has no price is refused.',
    kind: 'choice',
    options: [
      { value: 'allow', label: 'Allow (recorded without cost)' },
      { value: 'deny', label: 'Deny' },
    ],
  },
  {
    key: 'run_max_steps',
    label: 'Steps per run',
    help: 'A run’s next step past this many allowed ones is denied (RUN_STEP_LIMIT_EXCEEDED). A run may set a lower limit of its own. Empty: no limit.',
    kind: 'integer',
    nullable: true,
  },
  {
    key: 'run_max_cost_usd',
    label: 'Cost per run (USD)',
    help: 'Once a run’s recorded cost reaches this, its steps are denied (RUN_BUDGET_EXCEEDED). Empty: no limit.',
    kind: 'usd',
    nullable: true,
  },
  {
    key: 'run_max_identical_calls',
    label: 'Identical calls in a row',
    help: 'A run repeating the same call (same tool or model, same input) more times in a row is denied (REPEATED_CALL_LOOP). Empty: no limit.',
    kind: 'integer',
    nullable: true,
  },
  {
    key: 'user_steps_per_minute',
    label: 'Steps per user per minute',
    help: 'Across all of a user’s runs, over the last 60 seconds; a proxied call past it gets a 429 with Retry-After (USER_RATE_LIMITED). Empty: no rate limit.',
    kind: 'integer',
    nullable: true,
  },
];

/** A field's value as the form shows it. */
export function toText(value: unknown): string {
  return value === null || value === undefined ? '' : String(value);
}

/** A field's text as the API's value; throws a sentence for the page to show. */
export function fromText(field: SettingField, text: string): unknown {
  const trimmed = text.trim();
  switch (field.kind) {
    case 'text':
    case 'choice':
      return trimmed;
    case 'usd':
      if (trimmed === '') return null;
      if (!/^\d+(\.\d+)?$/.test(trimmed))
        throw new Error(`${field.label}: enter an amount like 10 or 2.50, or leave it empty.`);
      return Number(trimmed);
    case 'integer':
      if (trimmed === '') return null;
      if (!/^\d+$/.test(trimmed)) throw new Error(`${field.label}: enter a whole number, or leave it empty.`);
      return Number(trimmed);
  }
}
