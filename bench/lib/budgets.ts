/**
 * What rule 13 costs per decision (issue #51): a workspace and a user with 0 and with 5 applicable
 * deny budgets (the workspace's per day, week and month, the user's per week and month; limits too
 * large to deny), in alternating rounds, on one or more daemons (builds) on Postgres + Redis. The
 * issue's target: the 5-budget case within 10% of the 0-budget case in calls/s.
 *
 * Cells: an API step's creation and result (a pair), and a proxied chat call into a run. Each
 * round measures every system, case, cell and connection count once, in an order that flips from
 * round to round; a round's ratio (5 budgets over 0, one system and cell) compares pieces measured
 * a few seconds apart, and the spread of the rounds' ratios says how much the machine moved.
 * Beside calls/s, the daemon's CPU time per call (all its threads, from schedstat): on a machine
 * shared with other work, calls/s follows the machine's load, CPU time per call far less.
 */
import { loadavg } from 'node:os';
import { cpuUs, type DaemonProcess } from './processes.js';
import { json, loop, pool } from './loops.js';
import { apiHeaders, chatTarget, MODEL } from './scenarios.js';
import { round } from './stats.js';

export const BUDGET_CASES = [0, 5] as const;
type Cell = 'step pair' | 'proxied call';
const CELLS: Cell[] = ['step pair', 'proxied call'];
const USER = 'bench-budgets-user';
const BUDGETS = [
  { scope: 'workspace', period: 'day' },
  { scope: 'workspace', period: 'week' },
  { scope: 'workspace', period: 'month' },
  { scope: 'user', subject: USER, period: 'week' },
  { scope: 'user', subject: USER, period: 'month' },
].map((budget) => ({ ...budget, limit_usd: 1_000_000 }));

export interface BudgetsSystem {
  /** "this build", "baseline build", ... */
  label: string;
  daemon: DaemonProcess;
  /** The proxy's provider name for a fast upstream. */
  provider: string;
}

/** Rounds' ratios: the median, and the lowest and highest. */
export interface Spread {
  median: number;
  min: number;
  max: number;
  byRound: number[];
}

export interface BudgetsRow {
  system: string;
  cell: Cell;
  connections: number;
  /** Calls/s over every round's piece, with 0 and with 5 budgets. */
  zeroOps: number;
  fiveOps: number;
  errors: [number, number];
  /** 5 budgets / 0 budgets, calls/s. */
  ratio: Spread;
  /** The daemon's CPU time per call (µs), over every round, with 0 and with 5 budgets. */
  zeroCpuUs: number;
  fiveCpuUs: number;
  /** 5 budgets / 0 budgets, CPU time per call (lower is cheaper). */
  cpuRatio: Spread;
}

export interface BudgetsResult {
  rounds: number;
  pieceS: number;
  loadavgAtStart: number[];
  loadavgAtEnd: number[];
  rows: BudgetsRow[];
  /**
   * Systems not measured, and why: a build from before `/v1/budgets` (issue #51) has no budgets
   * to set, so it has no 5-budget case (absent from runs before 2026-11-29 08:00).
   */
  leftOut?: { system: string; reason: string }[];
  /** Where a baseline was measured: the first system's calls/s over the baseline's, by case. */
  versusBaseline?: { cell: Cell; connections: number; budgets: number; ratio: Spread; cpuRatio: Spread }[];
}

export function spread(values: number[]): Spread {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length / 2;
  const median = sorted.length % 2 ? sorted[Math.floor(middle)]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
  return {
    median: round(median, 3),
    min: round(sorted[0]!, 3),
    max: round(sorted[sorted.length - 1]!, 3),
    byRound: values.map((value) => round(value, 3)),
  };
}

interface Piece {
  ops: number;
  seconds: number;
  errors: number;
  cpuUsPerCall: number;
}

/**
 * Whether a daemon serves `/v1/budgets`: a build from before issue #51 answers 404 (no such route),
 * where a build with budgets lists them.
 */
export async function servesBudgets(daemon: DaemonProcess): Promise<boolean> {
  const admin = pool(daemon.url, 1);
  try {
    const res = await admin.request({ method: 'GET', path: '/v1/budgets', headers: apiHeaders(daemon) });
    const text = await res.body.text();
    if (res.statusCode === 200) return true;
    if (res.statusCode === 404) return false;
    throw new Error(`GET /v1/budgets: ${res.statusCode} ${text.slice(0, 200)}`);
  } finally {
    await admin.close();
  }
}

export async function budgetsScenario(options: {
  systems: BudgetsSystem[];
  connections: number[];
  rounds: number;
  pieceS: number;
  log: (line: string) => void;
}): Promise<BudgetsResult> {
  const { connections, rounds, pieceS, log } = options;
  // A build without budgets (a baseline from before #51) is left out, and the report says so.
  const leftOut: { system: string; reason: string }[] = [];
  const systems: BudgetsSystem[] = [];
  for (const system of options.systems) {
    if (await servesBudgets(system.daemon)) systems.push(system);
    else {
      leftOut.push({ system: system.label, reason: 'no /v1/budgets in this build (GET answered 404)' });
      log(`budgets: ${system.label} left out: its build has no /v1/budgets`);
    }
  }
  const loadavgAtStart = loadavg();
  /** By system, cell, connections and case: each round's piece. */
  const pieces = new Map<string, Piece[]>();
  const key = (system: string, cell: Cell, c: number, budgets: number) => `${system}|${cell}|${c}|${budgets}`;
  const budgetIds = new Map<string, string[]>();

  const setBudgets = async (system: BudgetsSystem, count: number) => {
    const admin = pool(system.daemon.url, 1);
    const headers = apiHeaders(system.daemon);
    try {
      for (const id of budgetIds.get(system.label) ?? []) {
        const res = await admin.request({ method: 'DELETE', path: `/v1/budgets/${id}`, headers });
        await res.body.text();
        if (res.statusCode !== 204) throw new Error(`DELETE /v1/budgets/${id}: ${res.statusCode}`);
      }
      const ids: string[] = [];
      for (const budget of BUDGETS.slice(0, count))
        ids.push((await json<{ id: string }>(admin, 'POST', '/v1/budgets', headers, budget, 201)).id);
      budgetIds.set(system.label, ids);
    } finally {
      await admin.close();
    }
  };

  const measure = async (system: BudgetsSystem, budgets: number, r: number) => {
    const headers = apiHeaders(system.daemon);
    for (const c of connections) {
      const api = pool(system.daemon.url, c);
      for (const cell of r % 2 ? CELLS : [...CELLS].reverse()) {
        // Runs of their own per cell: a proxied call takes the run's next sequence, a step pair gives its own.
        const runs = await Promise.all(
          Array.from({ length: c }, async () => {
            const run = await json<{ id: string }>(api, 'POST', '/v1/runs', headers, { user_id: USER }, 201);
            return { id: run.id, sequence: 0 };
          }),
        );
        const operations: Record<Cell, (worker: number) => Promise<void>> = {
          'step pair': async (worker) => {
            const run = runs[worker]!;
            const step = await json<{ id: string; status: string }>(
              api,
              'POST',
              `/v1/runs/${run.id}/steps`,
              headers,
              { type: 'MODEL_CALL', sequence: ++run.sequence, model: MODEL },
              201,
            );
            if (step.status !== 'ALLOWED') throw new Error(`step ${step.status}`);
            await json(
              api,
              'PATCH',
              `/v1/runs/${run.id}/steps/${step.id}`,
              headers,
              { status: 'COMPLETED', prompt_tokens: 20, completion_tokens: 10 },
              200,
            );
          },
          'proxied call': async (worker) => {
            const target = chatTarget(system.daemon, runs[worker]!.id, undefined, system.provider);
            const res = await api.request({
              method: 'POST',
              path: new URL(target.url).pathname,
              headers: target.headers,
              body: target.body,
            });
            await res.body.text();
            if (res.statusCode !== 200) throw new Error(`proxied call answered ${res.statusCode}`);
          },
        };
        await loop(c, 0.5, operations[cell]);
        const cpuBefore = await cpuUs(system.daemon.pid);
        const result = await loop(c, pieceS, operations[cell]);
        const calls = result.ops * result.durationS;
        const cpuUsPerCall = ((await cpuUs(system.daemon.pid)) - cpuBefore) / calls;
        if (result.firstError)
          log(
            `budgets: ${system.label}, ${cell}, ${budgets} budgets: ${result.errors} errors, first: ${result.firstError}`,
          );
        const k = key(system.label, cell, c, budgets);
        pieces.set(k, [
          ...(pieces.get(k) ?? []),
          { ops: result.ops, seconds: result.durationS, errors: result.errors, cpuUsPerCall },
        ]);
        await Promise.all(
          runs.map((run) => json(api, 'POST', `/v1/runs/${run.id}/end`, headers, { status: 'COMPLETED' }, 200)),
        );
      }
      await api.close();
    }
  };

  for (let r = 0; r < rounds; r++) {
    // Every order flips from round to round, so no case always follows the other's load.
    for (const system of r % 2 ? [...systems].reverse() : systems) {
      for (const budgets of r % 2 ? [...BUDGET_CASES].reverse() : BUDGET_CASES) {
        await setBudgets(system, budgets);
        await measure(system, budgets, r);
      }
    }
    log(`budgets: round ${r + 1} of ${rounds} done (load average ${loadavg()[0]!.toFixed(1)})`);
  }
  for (const system of systems) await setBudgets(system, 0);

  const pooled = (list: Piece[]) =>
    list.reduce((sum, piece) => sum + piece.ops * piece.seconds, 0) /
    list.reduce((sum, piece) => sum + piece.seconds, 0);
  const perCall = (list: Piece[]) =>
    list.reduce((sum, piece) => sum + piece.cpuUsPerCall * piece.ops * piece.seconds, 0) /
    list.reduce((sum, piece) => sum + piece.ops * piece.seconds, 0);
  const rows: BudgetsRow[] = [];
  for (const system of systems)
    for (const cell of CELLS)
      for (const c of connections) {
        const zero = pieces.get(key(system.label, cell, c, 0))!;
        const five = pieces.get(key(system.label, cell, c, 5))!;
        rows.push({
          system: system.label,
          cell,
          connections: c,
          zeroOps: round(pooled(zero), 1),
          fiveOps: round(pooled(five), 1),
          errors: [zero.reduce((n, piece) => n + piece.errors, 0), five.reduce((n, piece) => n + piece.errors, 0)],
          ratio: spread(five.map((piece, i) => piece.ops / zero[i]!.ops)),
          zeroCpuUs: round(perCall(zero), 0),
          fiveCpuUs: round(perCall(five), 0),
          cpuRatio: spread(five.map((piece, i) => piece.cpuUsPerCall / zero[i]!.cpuUsPerCall)),
        });
      }
  const result: BudgetsResult = {
    rounds,
    pieceS,
    loadavgAtStart,
    loadavgAtEnd: loadavg(),
    rows,
    ...(leftOut.length ? { leftOut } : {}),
  };
  if (systems.length > 1) {
    const [first, baseline] = systems;
    result.versusBaseline = CELLS.flatMap((cell) =>
      connections.flatMap((c) =>
        BUDGET_CASES.map((budgets) => {
          const mine = pieces.get(key(first!.label, cell, c, budgets))!;
          const theirs = pieces.get(key(baseline!.label, cell, c, budgets))!;
          return {
            cell,
            connections: c,
            budgets,
            ratio: spread(mine.map((piece, i) => piece.ops / theirs[i]!.ops)),
            cpuRatio: spread(mine.map((piece, i) => piece.cpuUsPerCall / theirs[i]!.cpuUsPerCall)),
          };
        }),
      ),
    );
  }
  return result;
}

const pct = (ratio: number) => `${ratio >= 1 ? '+' : ''}${((ratio - 1) * 100).toFixed(1)}%`;

/** The result as markdown tables: 0 against 5 budgets by system, and a build against the baseline. */
export function budgetsMarkdown(result: BudgetsResult): string[] {
  const out = [
    `${result.rounds} alternating rounds of ${result.pieceS} s per piece; load average ${result.loadavgAtStart.map((x) => x.toFixed(1)).join(' ')} at the start, ` +
      `${result.loadavgAtEnd.map((x) => x.toFixed(1)).join(' ')} at the end. "5 / 0" is each round's 5-budget calls/s over its 0-budget calls/s: the median, and [lowest, highest] of the rounds.`,
    '',
    '| system | cell | connections | 0 budgets calls/s | 5 budgets calls/s | 5 / 0, median [range] | daemon CPU µs/call (0, 5) | CPU 5 / 0, median [range] | errors (0, 5) |',
    '|---|---|---|---|---|---|---|---|---|',
  ];
  const range = (s: Spread) => `${s.median.toFixed(3)} (${pct(s.median)}) [${s.min.toFixed(3)}, ${s.max.toFixed(3)}]`;
  for (const row of result.rows)
    out.push(
      `| ${row.system} | ${row.cell} | ${row.connections} | ${row.zeroOps.toFixed(0)} | ${row.fiveOps.toFixed(0)} | ${range(row.ratio)} | ` +
        `${row.zeroCpuUs}, ${row.fiveCpuUs} | ${range(row.cpuRatio)} | ${row.errors.join(', ')} |`,
    );
  for (const { system, reason } of result.leftOut ?? []) out.push('', `Not measured: ${system}: ${reason}.`);
  if (result.versusBaseline) {
    out.push(
      '',
      'The first system over the second, round by round: median [range].',
      '',
      '| cell | connections | budgets | calls/s ratio, median [range] | CPU per call ratio, median [range] |',
      '|---|---|---|---|---|',
    );
    for (const row of result.versusBaseline)
      out.push(`| ${row.cell} | ${row.connections} | ${row.budgets} | ${range(row.ratio)} | ${range(row.cpuRatio)} |`);
  }
  return out;
}
