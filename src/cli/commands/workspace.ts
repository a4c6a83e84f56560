/** `runguard budget set` and `runguard limits set`: the workspace's budgets and run limits. */
import { Command, InvalidArgumentError, Option } from 'commander';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { ApiRequestError } from '../errors.js';
import { usd, type Output } from '../output.js';

interface Workspace {
  plan: string;
  daily_budget_usd: number | null;
  user_daily_budget_usd: number | null;
  monthly_run_limit: number | null;
  max_concurrent_runs: number | null;
  unpriced_models?: 'allow' | 'deny';
  budget_mode?: 'spend' | 'reserve';
  default_step_reservation_usd?: number;
}

/**
 * Commander keeps no null from a parser, so options hold this marker for "no limit" and the
 * request body turns it into the API's null.
 */
export const UNLIMITED = 'unlimited';
const orNull = (value: unknown) => (value === UNLIMITED ? null : value);

/** `none` (or `unlimited`) is no budget; otherwise a non-negative amount. */
export function parseUsd(text: string, what: string): number | typeof UNLIMITED {
  if (/^(none|unlimited)$/i.test(text)) return UNLIMITED;
  const value = Number(text.replace(/^\$/, ''));
  if (!/^\$?\d+(\.\d+)?$/.test(text) || !Number.isFinite(value)) {
    throw new InvalidArgumentError(`${what} must be an amount in USD like 12.50, or 'none'.`);
  }
  return value;
}

function parseLimit(text: string): number | typeof UNLIMITED {
  if (/^(none|unlimited)$/i.test(text)) return UNLIMITED;
  if (!/^\d+$/.test(text)) throw new InvalidArgumentError("must be a whole number, or 'none'.");
  return Number(text);
}

const show = (w: Workspace) => [
  ['workspace daily budget', w.daily_budget_usd === null ? 'unlimited' : usd(w.daily_budget_usd)],
  ['per-user daily budget', w.user_daily_budget_usd === null ? 'unlimited' : usd(w.user_daily_budget_usd)],
  ['monthly runs', w.monthly_run_limit ?? 'unlimited'],
  ['concurrent runs', w.max_concurrent_runs ?? 'unlimited'],
  ...(w.unpriced_models ? [['unpriced models', w.unpriced_models]] : []),
  ...(w.budget_mode ? [['budget mode', w.budget_mode]] : []),
  ...(w.default_step_reservation_usd !== undefined
    ? [['default step reservation', usd(w.default_step_reservation_usd)]]
    : []),
];

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
  };
  for (const [key, value] of Object.entries(changes)) if (value === 0 && zero[key]) out.warn(`${zero[key]}.`);
}

function setter(
  name: string,
  description: string,
  options: Option[],
  body: (o: Record<string, unknown>) => Record<string, unknown>,
) {
  const command = apiCommand('set', description);
  for (const option of options) command.addOption(option);
  return new Command(name).description(description).addCommand(
    command.action(
      withApi(async ({ client, out }, o: ApiOptions & Record<string, unknown>) => {
        const changes = body(o);
        if (Object.keys(changes).length === 0)
          throw new InvalidArgumentError(
            `nothing to set: give at least one of ${options.map((x) => x.long).join(', ')}`,
          );
        const workspace = await client.request<Workspace>('PATCH', '/v1/workspace', changes).catch((error: unknown) => {
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
      new Option('--workspace-daily <usd>', 'USD per UTC day for the whole workspace').argParser((v) =>
        parseUsd(v, '--workspace-daily'),
      ),
      new Option('--user-daily <usd>', 'USD per UTC day for each user without a budget of their own').argParser((v) =>
        parseUsd(v, '--user-daily'),
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
      ).argParser((v) => {
        const value = parseUsd(v, '--default-step-reservation');
        if (value === UNLIMITED) throw new InvalidArgumentError('--default-step-reservation must be an amount in USD.');
        return value;
      }),
    ],
    (o) => ({
      ...(o.mode !== undefined && { budget_mode: o.mode }),
      ...(o.defaultStepReservation !== undefined && { default_step_reservation_usd: o.defaultStepReservation }),
      ...(o.unpricedModels !== undefined && { unpriced_models: o.unpricedModels }),
      ...(o.workspaceDaily !== undefined && { daily_budget_usd: orNull(o.workspaceDaily) }),
      ...(o.userDaily !== undefined && { user_daily_budget_usd: orNull(o.userDaily) }),
    }),
  );
}

export function limitsCommand(): Command {
  return setter(
    'limits',
    "set the monthly run limit and the concurrent run limit, within the plan's ceiling ('none' = unlimited: enterprise plan only)",
    [
      new Option('--monthly-runs <n>', 'allowed run starts per UTC month').argParser(parseLimit),
      new Option('--concurrent-runs <n>', 'RUNNING runs at once').argParser(parseLimit),
    ],
    (o) => ({
      ...(o.monthlyRuns !== undefined && { monthly_run_limit: orNull(o.monthlyRuns) }),
      ...(o.concurrentRuns !== undefined && { max_concurrent_runs: orNull(o.concurrentRuns) }),
    }),
  );
}
