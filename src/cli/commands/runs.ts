/** `runguard runs list|show|tail`: the audit record of runs, steps and decisions. */
import { Command, Option } from 'commander';
import type { ApiClient, RunDetail, RunStatus, RunSummary, Step } from '../api-client.js';
import { explainDenial } from '../../contract/denial-detail.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { CliError, DaemonUnreachableError, describeError } from '../errors.js';
import { duration, pageFooter, timestamp, usd, type Output } from '../output.js';
import { statusWord } from '../style.js';
import { costWithUnpriced, unpricedCalls } from '../unpriced.js';

const STATUSES: RunStatus[] = ['RUNNING', 'COMPLETED', 'FAILED', 'BLOCKED'];

function positiveInt(name: string, max: number) {
  return (text: string): number => {
    const n = Number(text);
    if (!/^\d+$/.test(text) || n < 1 || n > max)
      throw new CliError(`${name} must be an integer from 1 to ${max} (got ${JSON.stringify(text)}).`);
    return n;
  };
}

const decisionText = (decision: { outcome: string; reason: string | null }) =>
  decision.outcome === 'DENY' ? `DENY ${decision.reason ?? ''}`.trim() : decision.outcome;
/** A denial with its numbers: `DENY USER_DAILY_BUDGET_EXCEEDED (user daily budget spent: $0.00045 of $0.0004; resets ...)`. */
const explainedDecision = (decision: RunDetail['decision']) => `${decisionText(decision)}${explanation(decision)}`;
/** A denial's numbers in parentheses, after its code; nothing for an ALLOW. */
const explanation = (decision: RunDetail['decision']) =>
  decision.outcome === 'DENY' && decision.reason ? ` (${explainDenial(decision.reason, decision.detail)})` : '';
const tokens = (step: Pick<Step, 'prompt_tokens' | 'completion_tokens'>) =>
  step.prompt_tokens === null && step.completion_tokens === null
    ? '-'
    : `${step.prompt_tokens ?? 0}+${step.completion_tokens ?? 0}`;

/** Model calls with tokens and no cost: `2 calls, 130 tokens (llama3:8b)`, or null when none. */
function unpricedSummary(steps: Step[]): string | null {
  const calls = unpricedCalls(steps);
  if (calls.length === 0) return null;
  const tokenSum = calls.reduce((n, step) => n + (step.prompt_tokens ?? 0) + (step.completion_tokens ?? 0), 0);
  const models = [...new Set(calls.map((step) => step.model ?? '(unknown model)'))].join(', ');
  return `${calls.length} call${calls.length === 1 ? '' : 's'}, ${tokenSum} tokens (${models})`;
}

/** The widest a MODELS cell grows before the rest of a run's models are counted, not named. */
const MODELS_CELL_WIDTH = 32;

/**
 * A run's models for one table cell, in first-use order: `gpt-4o-mini, gpt-4o +2` when they do not
 * all fit (the first is always named, cut with `…` if it alone is too wide); `-` for none.
 */
export function modelsCell(models: readonly string[]): string {
  if (models.length === 0) return '-';
  let shown = 0;
  let text = '';
  for (const model of models) {
    const next = shown === 0 ? model : `${text}, ${model}`;
    const rest = models.length - shown - 1;
    const suffix = rest > 0 ? ` +${rest}` : '';
    if (shown > 0 && next.length + suffix.length > MODELS_CELL_WIDTH) break;
    text = next;
    shown += 1;
  }
  if (shown === 1 && text.length > MODELS_CELL_WIDTH) text = `${text.slice(0, MODELS_CELL_WIDTH - 1)}…`;
  return shown < models.length ? `${text} +${models.length - shown}` : text;
}

function listCommand() {
  return apiCommand('list', 'list runs, newest first')
    .addOption(new Option('--status <status>', 'only runs in this status').choices(STATUSES))
    .addOption(new Option('--user <user_id>', 'only runs of this SDK user'))
    .addOption(new Option('--page <n>', 'page, from 1').argParser(positiveInt('--page', 1_000_000)).default(1))
    .addOption(
      new Option('--per-page <n>', 'runs per page, at most 100').argParser(positiveInt('--per-page', 100)).default(50),
    )
    .addHelpText(
      'after',
      '\nCOST "$0.0012 +2 unpriced": two model calls had tokens and no price (counted as $0; see `runs show`).' +
        '\nDENIED: why a BLOCKED run was refused, or the reason of its last denied step ("+2": two more denied).',
    )
    .action(
      withApi(
        async (
          { client, out },
          options: ApiOptions & { status?: RunStatus; user?: string; page: number; perPage: number },
        ) => {
          const page = await client.listRuns({
            status: options.status,
            user_id: options.user,
            page: options.page,
            per_page: options.perPage,
          });
          if (out.json) return out.data(page);
          if (page.total === 0) return out.line('No runs.');
          out.table(
            ['ID', 'USER', 'STATUS', 'STARTED', 'ENDED', 'STEPS', 'TOKENS', 'COST', 'MODELS', 'DENIED'],
            page.items.map((run) => [
              run.id,
              run.user_id,
              statusWord(out.style, run.status),
              timestamp(run.started_at),
              timestamp(run.ended_at),
              run.step_count,
              run.total_tokens,
              costCell(run),
              modelsCell(run.models),
              out.style.bad(deniedCell(run)),
            ]),
          );
          out.line(`\n${pageFooter(page, 'run')}`);
        },
      ),
    );
}

/** A run's cost for one table cell: `$0.0012`, or `$0.00 +2 unpriced` when calls have no price. */
export const costCell = (run: Pick<RunSummary, 'total_cost_usd' | 'unpriced_calls'>) =>
  run.unpriced_calls === 0 ? usd(run.total_cost_usd) : `${usd(run.total_cost_usd)} +${run.unpriced_calls} unpriced`;

/**
 * Why a run was denied, for one table cell: a BLOCKED run's reason, else its last denied step's,
 * with how many more steps were denied (`RUN_BUDGET_EXCEEDED +2`); empty when nothing was.
 */
export function deniedCell(run: Pick<RunSummary, 'status' | 'denied_steps' | 'denial_reason'>): string {
  if (run.denial_reason === null) return '';
  const more = run.status === 'BLOCKED' ? 0 : run.denied_steps - 1;
  return more > 0 ? `${run.denial_reason} +${more}` : run.denial_reason;
}

export function printRun(out: Output, run: RunDetail) {
  out.line(`Run       ${run.id}`);
  out.line(`User      ${run.user_id}`);
  out.line(`Status    ${statusWord(out.style, run.status)}`);
  out.line(`Decision  ${statusWord(out.style, decisionText(run.decision))}${explanation(run.decision)}`);
  out.line(`Started   ${timestamp(run.started_at)}`);
  out.line(`Ended     ${timestamp(run.ended_at)}`);
  out.line(`Duration  ${duration(run.duration_ms)}`);
  out.line(`Tokens    ${run.total_tokens}`);
  out.line(`Cost      ${usd(run.total_cost_usd)}`);
  if (run.metadata) out.line(`Metadata  ${JSON.stringify(run.metadata)}`);
  const unpriced = unpricedSummary(run.steps);
  if (unpriced) out.line(`Unpriced  ${unpriced} (counted as $0 against budgets)`);
  out.line();
  if (run.steps.length === 0) return out.line('No steps.');
  out.table(
    ['SEQ', 'TYPE', 'MODEL/TOOL', 'STATUS', 'DECISION', 'TOKENS', 'COST', 'DURATION', 'CREATED'],
    run.steps.map((step) => [
      step.sequence,
      step.type,
      step.model ?? step.tool_name,
      statusWord(out.style, step.status),
      statusWord(out.style, decisionText(step.decision)),
      tokens(step),
      usd(step.cost_usd),
      duration(step.duration_ms),
      timestamp(step.created_at),
    ]),
  );
  const denied = run.steps.filter((step) => step.decision.outcome === 'DENY');
  if (denied.length) out.line();
  for (const step of denied) out.line(`Step ${step.sequence} denied: ${explainedDecision(step.decision)}`);
  // Failed on the way (an unreachable upstream names itself in its detail).
  for (const step of run.steps) {
    const output = step.output_data as { error?: unknown; detail?: unknown } | null;
    if (step.status !== 'FAILED' || typeof output?.detail !== 'string') continue;
    out.line(`Step ${step.sequence} failed: ${String(output.error)}: ${output.detail}`);
  }
}

function showCommand() {
  return apiCommand('show', 'a run with its step timeline: decisions, tokens, cost')
    .argument('<run_id>', 'the run id')
    .action(
      withApi(async ({ client, out }, _options, runId: string) => {
        const run = await client.getRun(runId);
        if (out.json) return out.data(run);
        printRun(out, run);
      }),
    );
}

// --- tail ---------------------------------------------------------------------------------

export type TailEvent =
  | { event: 'run_started'; run: RunSummary }
  | { event: 'step_created'; run_id: string; step: Step }
  | { event: 'step_finished'; run_id: string; step: Step }
  | { event: 'run_ended'; run: RunSummary };

interface Tracked {
  status: RunSummary['status'];
  stepCount: number;
  /** Step id to the status it was last printed with. */
  steps: Map<string, Step['status']>;
  /** Steps not finished yet: the run is read again until they are. */
  open: boolean;
}

/**
 * Follows the run listing: new runs, their steps as they are created and finished, and their
 * end. Runs that existed before the tail started are followed but not announced.
 */
export class RunFollower {
  private readonly runs = new Map<string, Tracked>();
  private primed = false;

  constructor(
    private readonly client: ApiClient,
    private readonly filter: { user_id?: string },
  ) {}

  async poll(): Promise<TailEvent[]> {
    const page = await this.client.listRuns({ ...this.filter, per_page: 100 });
    const events: TailEvent[] = [];
    // Oldest first, so events come out in the order they happened.
    for (const run of [...page.items].reverse()) {
      const known = this.runs.get(run.id);
      if (!known) {
        const tracked: Tracked = { status: run.status, stepCount: 0, steps: new Map(), open: false };
        this.runs.set(run.id, tracked);
        if (!this.primed) {
          // Already there: remember its steps silently; follow it only while it runs.
          tracked.stepCount = run.step_count;
          if (run.status === 'RUNNING' && run.step_count > 0) await this.readSteps(run, tracked, null);
          continue;
        }
        events.push({ event: 'run_started', run });
        if (run.step_count > 0) await this.readSteps(run, tracked, events);
        if (run.status !== 'RUNNING' && run.status !== 'BLOCKED') events.push({ event: 'run_ended', run });
        continue;
      }
      if (
        run.step_count !== known.stepCount ||
        known.open ||
        (run.status !== known.status && run.status !== 'RUNNING')
      ) {
        await this.readSteps(run, known, events);
      }
      if (known.status === 'RUNNING' && run.status !== 'RUNNING') events.push({ event: 'run_ended', run });
      known.status = run.status;
    }
    this.primed = true;
    return events;
  }

  private async readSteps(run: RunSummary, tracked: Tracked, events: TailEvent[] | null) {
    let detail: RunDetail;
    try {
      detail = await this.client.getRun(run.id);
    } catch (error) {
      if (error instanceof DaemonUnreachableError) throw error;
      return; // Gone or unreadable: the listing will say more on the next poll.
    }
    tracked.stepCount = detail.steps.length;
    tracked.open = false;
    for (const step of detail.steps) {
      const seen = tracked.steps.get(step.id);
      if (step.status === 'ALLOWED') tracked.open = true;
      if (seen === step.status) continue;
      tracked.steps.set(step.id, step.status);
      if (!events) continue;
      if (seen === undefined) events.push({ event: 'step_created', run_id: run.id, step });
      if (step.status === 'COMPLETED' || step.status === 'FAILED')
        events.push({ event: 'step_finished', run_id: run.id, step });
    }
  }
}

function printEvent(out: Output, event: TailEvent) {
  if (out.json) return out.event(event);
  const time = new Date().toISOString().slice(11, 19);
  switch (event.event) {
    case 'run_started':
      return out.line(
        `${time}  run ${event.run.id}  user ${event.run.user_id}  ${event.run.status === 'BLOCKED' ? out.style.bad('BLOCKED at start') : 'started'}`,
      );
    case 'step_created': {
      const step = event.step;
      return out.line(
        `${time}  run ${event.run_id}  step ${step.sequence} ${step.type}${(step.model ?? step.tool_name) ? ` ${step.model ?? step.tool_name}` : ''}  ${step.status === 'BLOCKED' ? out.style.bad(`BLOCKED ${step.decision.reason ?? ''}`.trim()) : 'allowed'}`,
      );
    }
    case 'step_finished': {
      const step = event.step;
      return out.line(
        `${time}  run ${event.run_id}  step ${step.sequence} ${statusWord(out.style, step.status)}  tokens ${tokens(step)}  cost ${usd(step.cost_usd)}  ${duration(step.duration_ms)}`,
      );
    }
    case 'run_ended':
      return out.line(
        `${time}  run ${event.run.id}  ${statusWord(out.style, event.run.status)}  steps ${event.run.step_count}  tokens ${event.run.total_tokens}  cost ${costWithUnpriced(usd(event.run.total_cost_usd), event.run.unpriced_calls)}`,
      );
  }
}

function tailCommand() {
  return apiCommand('tail', 'follow new runs and steps as they happen (Ctrl-C to stop)')
    .addOption(
      new Option('--interval <ms>', 'poll interval in milliseconds')
        .argParser(positiveInt('--interval', 3_600_000))
        .default(2_000),
    )
    .addOption(new Option('--user <user_id>', 'only runs of this SDK user'))
    .action(
      withApi(async ({ client, out }, options: ApiOptions & { interval: number; user?: string }) => {
        const follower = new RunFollower(client, { user_id: options.user });
        await follower.poll(); // Fails loudly when the daemon is not there at all.
        if (!out.json) out.line(`Following runs at ${client.url} every ${options.interval}ms (Ctrl-C to stop).`);
        let stopped = false;
        let wake: () => void = () => {};
        const stop = () => {
          stopped = true;
          wake();
        };
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
        let unreachable = false;
        while (!stopped) {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, options.interval);
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          if (stopped) break;
          try {
            for (const event of await follower.poll()) printEvent(out, event);
            if (unreachable) out.warn('the daemon answers again.');
            unreachable = false;
          } catch (error) {
            // A daemon restart should not end the tail: say so once and keep polling.
            if (!unreachable) out.warn(`${describeError(error).message} Retrying every ${options.interval}ms.`);
            unreachable = true;
          }
        }
        process.off('SIGINT', stop);
        process.off('SIGTERM', stop);
      }),
    );
}

export function runsCommand(): Command {
  return new Command('runs')
    .description('runs, their steps and guardrail decisions')
    .addCommand(listCommand())
    .addCommand(showCommand())
    .addCommand(tailCommand());
}
