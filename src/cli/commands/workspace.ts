/**
 * `runguard budget [show|set]` and `runguard limits [show|set]`: the workspace's budgets and run
 * limits. Without a subcommand (or with `show`), the current values.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import type { Workspace } from '../../contract/index.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { ApiRequestError } from '../errors.js';
import { usd, type Output } from '../output.js';

/**
 * Commander keeps no null from a parser, so options hold this marker for "no limit" and the
 * request body turns it into the API's null.
 */
export const UNLIMITED = 'unlimited';
const orNull = (value: unknown) => (value === UNLIMITED ? null : value);

/** `none` (or `unlimited`) is no budget; otherwise a non-negative amount. */
export function parseUsd(text: string, what: string): number | typeof UNLIMITED {
  if (/^(none|unlimited)$/i.test(text)) return UNLIMITED;
  // A dollar sign before or after the amount, as people write it: `$5`, `10$`.
  const amount = text.replace(/^\$|\$$/, '');
  const value = Number(amount);
  if (!/^\d+(\.\d+)?$/.test(amount) || !Number.isFinite(value)) {
    throw new InvalidArgumentError(`${what} must be an amount in USD like 12.50, or 'none'.`);
  }
  return value;
}

/** `none` is off; otherwise a whole number of at least 1 (the runaway limits). */
function parsePositive(text: string): number | typeof UNLIMITED {
  if (/^(none|unlimited|off)$/i.test(text)) return UNLIMITED;
  if (!/^[1-9]\d*$/.test(text)) throw new InvalidArgumentError("must be a whole number of at least 1, or 'none'.");
  return Number(text);
}

function parseLimit(text: string): number | typeof UNLIMITED {
  if (/^(none|unlimited)$/i.test(text)) return UNLIMITED;
  if (!/^\d+$/.test(text)) throw new InvalidArgumentError("must be a whole number, or 'none'.");
  return Number(text);
}

/** The budget settings as name and value pairs. */
export const budgetRows = (workspace: Workspace): [string, string | number][] => [
  ['workspace daily budget', workspace.daily_budget_usd === null ? 'unlimited' : usd(workspace.daily_budget_usd)],
  [
    'per-user daily budget',
    workspace.user_daily_budget_usd === null ? 'unlimited' : usd(workspace.user_daily_budget_usd),
  ],
  ...(workspace.unpriced_models ? [['unpriced models', workspace.unpriced_models] as [string, string]] : []),
  ...(workspace.budget_mode ? [['budget mode', workspace.budget_mode] as [string, string]] : []),
  ...(workspace.default_step_reservation_usd !== undefined
    ? [['default step reservation', usd(workspace.default_step_reservation_usd)] as [string, string]]
    : []),
];

/** The run limits, then the runaway limits (docs/limits.md: off unless set), as name and value pairs. */
export const limitRows = (workspace: Workspace): [string, string | number][] => [
  ['monthly runs', workspace.monthly_run_limit ?? 'unlimited'],
  ['concurrent runs', workspace.max_concurrent_runs ?? 'unlimited'],
  ...(workspace.run_max_steps !== undefined
    ? [['steps per run', workspace.run_max_steps ?? 'off'] as [string, string | number]]
    : []),
  ...(workspace.run_max_cost_usd !== undefined
    ? [
        ['cost per run', workspace.run_max_cost_usd === null ? 'off' : usd(workspace.run_max_cost_usd)] as [
          string,
          string,
        ],
      ]
    : []),
  ...(workspace.run_max_identical_calls !== undefined
    ? [['identical calls in a row', workspace.run_max_identical_calls ?? 'off'] as [string, string | number]]
    : []),
  ...(workspace.user_steps_per_minute !== undefined
    ? [['steps per user per minute', workspace.user_steps_per_minute ?? 'off'] as [string, string | number]]
    : []),
];

const show = (workspace: Workspace) => [...budgetRows(workspace), ...limitRows(workspace)];

/** What `--json` shows of the workspace for a settings command: its fields, as the API names them. */
const BUDGET_FIELDS = [
  'daily_budget_usd',
  'user_daily_budget_usd',
  'unpriced_models',
  'budget_mode',
  'default_step_reservation_usd',
] as const;
const LIMIT_FIELDS = [
  'monthly_run_limit',
  'max_concurrent_runs',
  'run_max_steps',
  'run_max_cost_usd',
  'run_max_identical_calls',
  'user_steps_per_minute',
] as const;

/** The ceilings of each plan, as the daemon enforces them (src/store/workspaces.ts). */
const PLAN_CEILINGS =
  'basic 1,000 runs a month and 5 at once, pro 25,000 and 25, scale 250,000 and 100, enterprise unlimited';

/** A limit above the plan's ceiling: say what the plans allow and how to move to another. */
function planHint(error: unknown): unknown {
  if (!(error instanceof ApiRequestError) || error.code !== 'PLAN_REQUIRED') return error;
  return new ApiRequestError(
    error.status,
    error.code,
    `${error.detail} Plans allow ${PLAN_CEILINGS} ('none' is unlimited: enterprise only). ` +
      "Change the plan with POST /v1/billing/plan and an account's token (see the README's dashboard API).",
    error.errors,
  );
}

/** Settings that deny everything are allowed (a way to pause), but never silently. */
function warnIfDenyingAll(out: Output, changes: Record<string, unknown>): void {
  const zero: Record<string, string> = {
    daily_budget_usd: 'a workspace daily budget of $0.00 denies every run and call',
    user_daily_budget_usd:
      'a per-user daily budget of $0.00 denies every run and call of users without a budget of their own',
    monthly_run_limit: 'a monthly run limit of 0 denies every run start (MONTHLY_RUN_LIMIT_EXCEEDED)',
    max_concurrent_runs: 'a concurrent run limit of 0 denies every run start (MAX_CONCURRENT_RUNS_EXCEEDED)',
    run_max_cost_usd: 'a run budget of $0.00 denies every step of every new run (RUN_BUDGET_EXCEEDED)',
  };
  for (const [key, value] of Object.entries(changes)) {
    if (typeof value !== 'number' || !zero[key]) continue;
    // Amounts are kept in whole microdollars: one below a microdollar is 0.
    if (value === 0) out.warn(`${zero[key]}.`);
    else if (Math.round(value * 1_000_000) === 0)
      out.warn(`${value} is below one microdollar and kept as 0: ${zero[key]}.`);
  }
}

function setter(
  name: string,
  description: string,
  options: Option[],
  body: (o: Record<string, unknown>) => Record<string, unknown>,
  current: { rows: (workspace: Workspace) => [string, string | number][]; fields: readonly (keyof Workspace)[] },
) {
  const command = apiCommand('set', description);
  for (const option of options) command.addOption(option);
  const showCurrent = withApi(async ({ client, out }) => {
    const workspace = await client.request<Workspace>('GET', '/v1/workspace');
    if (out.json) {
      return out.data(
        Object.fromEntries(
          current.fields.filter((field) => field in workspace).map((field) => [field, workspace[field]]),
        ),
      );
    }
    out.table(['', ''], current.rows(workspace));
  });
  // With positional options: `limits set --json` is the subcommand's option, not the group's.
  return apiCommand(name, `${description}; without a subcommand, show the current values`)
    .enablePositionalOptions()
    .action(showCurrent)
    .addCommand(apiCommand('show', `show the current ${name}`).action(showCurrent))
    .addCommand(
      command.action(
        withApi(async ({ client, out }, given: ApiOptions & Record<string, unknown>) => {
          const changes = body(given);
          if (Object.keys(changes).length === 0)
            throw new InvalidArgumentError(
              `nothing to set: give at least one of ${options.map((option) => option.long).join(', ')}`,
            );
          const workspace = await client
            .request<Workspace>('PATCH', '/v1/workspace', changes)
            .catch((error: unknown) => {
              throw planHint(error);
            });
          warnIfDenyingAll(out, changes);
          if (out.json) return out.data(workspace);
          out.table(['', ''], show(workspace));
        }),
      ),
    );
}

export function budgetCommand(): Command {
  return setter(
    'budget',
    "set the workspace's daily budgets in USD ('none' = unlimited)",
    [
      new Option('--workspace-daily <usd>', 'USD per UTC day for the whole workspace').argParser((text) =>
        parseUsd(text, '--workspace-daily'),
      ),
      new Option('--user-daily <usd>', 'USD per UTC day for each user without a budget of their own').argParser(
        (text) => parseUsd(text, '--user-daily'),
      ),
      new Option(
        '--unpriced-models <policy>',
        "a model call of a model without a price: 'allow' (counts $0) or 'deny' (MODEL_NOT_PRICED)",
      ).choices(['allow', 'deny']),
      new Option(
        '--mode <mode>',
        "'spend' (deny once spend reaches a budget) or 'reserve' (each call reserves its cost estimate first)",
      ).choices(['spend', 'reserve']),
      new Option(
        '--default-step-reservation <usd>',
        'what an API/SDK step without max_cost_usd reserves in reserve mode',
      ).argParser((text) => {
        const value = parseUsd(text, '--default-step-reservation');
        if (value === UNLIMITED) throw new InvalidArgumentError('--default-step-reservation must be an amount in USD.');
        return value;
      }),
    ],
    (given) => ({
      ...(given.mode !== undefined && { budget_mode: given.mode }),
      ...(given.defaultStepReservation !== undefined && { default_step_reservation_usd: given.defaultStepReservation }),
      ...(given.unpricedModels !== undefined && { unpriced_models: given.unpricedModels }),
      ...(given.workspaceDaily !== undefined && { daily_budget_usd: orNull(given.workspaceDaily) }),
      ...(given.userDaily !== undefined && { user_daily_budget_usd: orNull(given.userDaily) }),
    }),
    { rows: budgetRows, fields: BUDGET_FIELDS },
  );
}

export function limitsCommand(): Command {
  return setter(
    'limits',
    "set the monthly run limit and the concurrent run limit, within the plan's ceiling ('none' = unlimited: enterprise plan only), " +
      "and the runaway limits: defaults of every new run's limits and a user's steps per minute ('none' = off)",
    [
      new Option('--monthly-runs <n>', 'allowed run starts per UTC month').argParser(parseLimit),
      new Option('--concurrent-runs <n>', 'RUNNING runs at once').argParser(parseLimit),
      new Option(
        '--run-max-steps <n>',
        "steps a run may be allowed (RUN_STEP_LIMIT_EXCEEDED); a run's own may be lower",
      ).argParser(parsePositive),
      new Option(
        '--run-max-cost <usd>',
        "USD a run may cost (RUN_BUDGET_EXCEEDED); a run's own may be lower",
      ).argParser((text) => parseUsd(text, '--run-max-cost')),
      new Option(
        '--run-max-identical-calls <n>',
        'identical calls in a row a run may make (REPEATED_CALL_LOOP)',
      ).argParser(parsePositive),
      new Option(
        '--user-steps-per-minute <n>',
        'steps a user may create per minute, across its runs (USER_RATE_LIMITED)',
      ).argParser(parsePositive),
    ],
    (given) => ({
      ...(given.monthlyRuns !== undefined && { monthly_run_limit: orNull(given.monthlyRuns) }),
      ...(given.concurrentRuns !== undefined && { max_concurrent_runs: orNull(given.concurrentRuns) }),
      ...(given.runMaxSteps !== undefined && { run_max_steps: orNull(given.runMaxSteps) }),
      ...(given.runMaxCost !== undefined && { run_max_cost_usd: orNull(given.runMaxCost) }),
      ...(given.runMaxIdenticalCalls !== undefined && { run_max_identical_calls: orNull(given.runMaxIdenticalCalls) }),
      ...(given.userStepsPerMinute !== undefined && { user_steps_per_minute: orNull(given.userStepsPerMinute) }),
    }),
    { rows: limitRows, fields: LIMIT_FIELDS },
  );
}
