/** The results file and the markdown tables regenerated into bench/README.md. */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { budgetsMarkdown, type BudgetsResult } from './budgets.js';
import type { HistoryResult } from './history.js';
import { formatBreakdown, type MemoryBreakdown } from './processes.js';
import type { CellResult } from './load.js';
import type { StreamTimes } from './loops.js';
import type { Added, ApiRow, ProxyProbe, ProxyRow, SseRow, StreamAdded } from './scenarios.js';
import { otelMarkdown, type OtelReport } from './otel.js';
import { soakVerdictLines, type SoakResult } from './soak.js';

export interface BenchReport {
  date: string;
  machine: { cpus: number; node: string; loadavgAtStart: number[] };
  options: Record<string, unknown>;
  proxyProbe?: ProxyProbe;
  proxy?: ProxyRow[];
  sse?: SseRow[];
  api?: ApiRow[];
  rss?: {
    /** 2 s after start: the start's garbage not yet collected. */
    atStartMb: number;
    /** After `idleSeconds` without traffic (`idleRssMb`), after start and after the load. */
    idleSeconds: number;
    idleMb: number;
    underLoadPeakMb: number;
    idleAfterLoadMb: number;
    /** Every 5 s of each idle wait, MB. */
    idleSamplesMb: number[];
    idleAfterLoadSamplesMb: number[];
    /** Where each idle reading's memory is, read right after it (absent from runs before 2026-11-24 13:30). */
    idleBreakdown?: MemoryBreakdown;
    idleAfterLoadBreakdown?: MemoryBreakdown;
  };
  history?: HistoryResult;
  /** Rule 13: 0 against 5 applicable budgets (issue #51). */
  budgets?: BudgetsResult;
  soak?: SoakResult;
  /** `--only otel`: the proxy path with OpenTelemetry off, on, and before it (its own README section). */
  otel?: OtelReport;
  targets: TargetCheck[];
}

export interface TargetCheck {
  target: string;
  limit: string;
  measured: string;
  /** null: not measured in this run. */
  pass: boolean | null;
  /**
   * What to read the figure beside: the same figure for the floors (what no guarded design can go
   * below here), or its spread across the rounds.
   */
  beside?: string;
}

const f = (n: number | undefined, d = 2) => (n === undefined || !Number.isFinite(n) ? 'n/a' : n.toFixed(d));
const signed = (n: number | undefined, d = 2) =>
  n === undefined || !Number.isFinite(n) ? 'n/a' : `${n >= 0 ? '+' : ''}${n.toFixed(d)}`;

export function checkTargets(r: BenchReport): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const cellOf = <T extends { connections: number; upstreamDelayMs?: number }>(
    rows: T[] | undefined,
    delayMs: number,
    c: number,
  ): T | undefined => rows?.find((x) => x.connections === c && x.upstreamDelayMs === delayMs);
  const add = (
    target: string,
    limit: string,
    value: number | undefined,
    ok: (v: number) => boolean,
    unit = ' ms',
    beside?: string,
  ) =>
    checks.push({
      target,
      limit,
      // A ratio with three decimals: at two, 0.498 would read as a failing 0.50.
      measured:
        value === undefined || !Number.isFinite(value) ? 'not measured' : `${f(value, unit === '' ? 3 : 2)}${unit}`,
      pass: value === undefined || !Number.isFinite(value) ? null : ok(value),
      beside,
    });
  // The latency targets are differences from the Fastify floor's added latency, read in the same
  // rounds; beside them, the same difference for the node:http floor, the I/O floor and Portkey.
  const overFloor = (x: number | undefined, floor: number) => (x === undefined ? undefined : x - floor);
  const besideFloor = (floor: number, others: [string, number | undefined][]) =>
    others
      .filter(([, v]) => v !== undefined)
      .map(([name, v]) => `${name} ${signed(v! - floor)} ms`)
      .join(', ');
  const latency = cellOf(r.proxy, 20, 16);
  for (const percentile of ['p50', 'p99'] as const) {
    const floor = latency?.floor.latency[percentile] ?? NaN;
    add(
      `Sidecar added latency minus the floor's, ${percentile}, upstream 20 ms, 16 connections`,
      percentile === 'p50' ? '<= 0.5 ms' : '<= 2 ms',
      overFloor(latency?.sidecar?.latency[percentile], floor),
      (v) => v <= (percentile === 'p50' ? 0.5 : 2),
      ' ms',
      latency
        ? besideFloor(floor, [
            ['node:http', latency.httpFloor?.latency[percentile]],
            ['I/O', latency.ioFloor.latency[percentile]],
            ['Portkey', latency.portkey?.latency[percentile]],
          ])
        : undefined,
    );
  }
  const sse = cellOf(r.sse, 20, 16);
  for (const percentile of ['p50', 'p99'] as const) {
    const floor = sse?.floor.ttfb[percentile] ?? NaN;
    add(
      `SSE time to first byte minus the floor's, ${percentile}, upstream 20 ms, 16 connections`,
      percentile === 'p50' ? '<= 0.5 ms' : '<= 2 ms',
      overFloor(sse?.sidecar?.ttfb[percentile], floor),
      (v) => v <= (percentile === 'p50' ? 0.5 : 2),
      ' ms',
      sse
        ? besideFloor(floor, [
            ['node:http', sse.httpFloor?.ttfb[percentile]],
            ['I/O', sse.ioFloor.ttfb[percentile]],
            ['Portkey', sse.portkey?.ttfb[percentile]],
          ])
        : undefined,
    );
  }
  const throughput = cellOf(r.proxy, 0, 64);
  add(
    'Sidecar throughput / Fastify floor throughput, upstream 0 ms, 64 connections',
    '>= 0.60',
    throughput?.sidecarVsFloorRps,
    (v) => v >= 0.6,
    '',
    throughput
      ? `node:http ${f(throughput.httpFloor ? throughput.httpFloor.rps / throughput.floor.rps : undefined, 3)}, ` +
          `I/O ${f(throughput.ioFloor.rps / throughput.floor.rps, 3)}, Portkey ${f(throughput.portkeyVsFloorRps, 3)}`
      : undefined,
  );
  // Ahead of Portkey's gateway in every cell: lower p50 and p99, higher throughput (SSE: time to first byte).
  for (const row of r.proxy ?? []) {
    if (!row.portkey || !row.sidecar) continue;
    const p50 = row.sidecar.latency.p50 - row.portkey.latency.p50;
    const p99 = row.sidecar.latency.p99 - row.portkey.latency.p99;
    const rps = row.sidecar.rps / row.portkey.rps;
    checks.push({
      target: `Ahead of Portkey, upstream ${row.upstreamDelayMs} ms, ${row.connections} connections (p50, p99, req/s)`,
      limit: 'p50 < 0, p99 < 0, x > 1',
      measured: `${signed(p50)} / ${signed(p99)} ms, x${f(rps, 3)}`,
      pass: p50 < 0 && p99 < 0 && rps > 1,
    });
  }
  for (const row of r.sse ?? []) {
    if (!row.portkey || !row.sidecar) continue;
    const p50 = row.sidecar.ttfb.p50 - row.portkey.ttfb.p50;
    const p99 = row.sidecar.ttfb.p99 - row.portkey.ttfb.p99;
    checks.push({
      target: `Ahead of Portkey, SSE time to first byte, upstream ${row.upstreamDelayMs} ms, ${row.connections} connections (p50, p99)`,
      limit: 'p50 < 0, p99 < 0',
      measured: `${signed(p50)} / ${signed(p99)} ms`,
      pass: p50 < 0 && p99 < 0,
    });
  }
  add(`Daemon RSS idle (${r.rss?.idleSeconds ?? 60} s after start)`, '<= 90 MB', r.rss?.idleMb, (v) => v <= 90, ' MB');
  add(
    `Daemon RSS idle (${r.rss?.idleSeconds ?? 60} s after the load)`,
    '<= 90 MB',
    r.rss?.idleAfterLoadMb,
    (v) => v <= 90,
    ' MB',
  );
  add('Daemon RSS under load (peak)', '<= 150 MB', r.rss?.underLoadPeakMb, (v) => v <= 150, ' MB');
  // Issue #49's soak: last 5 minutes within 10% of minutes 5 to 10 (scaled in a shorter trial),
  // no error, every call recorded. Its verdicts are the soak's own (bench/lib/soak-verdict.ts).
  const soak = r.soak;
  const soakRun = soak ? `${soak.minutes}-minute soak at ${soak.rate} calls/s` : 'soak';
  const windows = soak?.windows.scaled ? ', windows scaled to its length' : '';
  const soakCheck = (
    target: string,
    limit: string,
    measured: (s: SoakResult) => string,
    pass: (s: SoakResult) => boolean,
  ) =>
    checks.push({
      target,
      limit,
      measured: soak ? measured(soak) : 'not measured',
      pass: soak ? pass(soak) : null,
    });
  soakCheck(
    `RSS over the ${soakRun}, last 5 minutes / minutes 5 to 10${windows}`,
    '0.90-1.10',
    (s) => `${f(s.rss.last, 1)} / ${f(s.rss.reference, 1)} MB = ${f(s.rss.ratio, 3)}`,
    (s) => s.rss.pass,
  );
  soakCheck(
    `p99 over the ${soakRun}, last 5 minutes / minutes 5 to 10${windows}`,
    '0.90-1.10',
    (s) => `${f(s.p99.last)} / ${f(s.p99.reference)} ms = ${f(s.p99.ratio, 3)}`,
    (s) => s.p99.pass,
  );
  soakCheck(
    `Errors over the ${soakRun}`,
    '0',
    (s) => String(s.errors.count),
    (s) => s.errors.pass,
  );
  soakCheck(
    `Every call of the ${soakRun} recorded (steps with their result / calls answered)`,
    'all',
    (s) => `${s.recorded.withResult} / ${s.recorded.answered} (${s.recorded.steps} steps)`,
    (s) => s.recorded.pass,
  );
  const h = r.history;
  const byRound = h?.stepCreateP50ByRound;
  add(
    'Step creation p50 with ~1M steps / empty database',
    '<= 1.10',
    h?.ratios.stepCreateP50,
    (v) => v <= 1.1,
    '',
    byRound?.length ? `by round x${f(Math.min(...byRound), 3)}-${f(Math.max(...byRound), 3)}` : undefined,
  );
  add('Step creation p99 with ~1M steps / empty database', '<= 1.10', h?.ratios.stepCreateP99, (v) => v <= 1.1, '');
  add('Run list first page p99 with ~1M steps', '< 20 ms', h?.full.runList.p99, (v) => v < 20);
  add('Run detail with 1,000 steps p99 with ~1M steps', '< 20 ms', h?.full.runDetail.p99, (v) => v < 20);
  // Issue #51: the 5-budget case within 10% of the 0-budget case, in every cell of the daemon.
  const budgets = r.budgets;
  const budgetRows = budgets?.rows.filter((row) => row.system === budgets.rows[0]!.system) ?? [];
  if (budgetRows.length === 0)
    add('5 applicable budgets / 0 budgets, calls/s (rule 13)', '>= 0.90', undefined, () => false, '');
  for (const row of budgetRows)
    add(
      `5 applicable budgets / 0 budgets, calls/s, ${row.cell}, ${row.connections} connections (median of the rounds)`,
      '>= 0.90',
      row.ratio.median,
      (v) => v >= 0.9,
      '',
      `by round x${f(row.ratio.min, 3)}-${f(row.ratio.max, 3)}; load average ${budgets!.loadavgAtStart[0]!.toFixed(1)}`,
    );
  return checks;
}

export function markdown(r: BenchReport): string {
  const out: string[] = [];
  out.push(
    `Run of ${r.date} on ${r.machine.cpus} CPUs, Node ${r.machine.node}, load average at start ${r.machine.loadavgAtStart.map((x) => x.toFixed(2)).join(' ')}; ` +
      `options: \`${JSON.stringify(r.options)}\`.`,
    '',
  );
  if (r.proxyProbe && !r.proxyProbe.available) out.push(`> **${r.proxyProbe.note}**`, '');
  out.push(
    '### Targets',
    '',
    '| target | limit | measured | | beside it: the floors, measured alike, or the rounds |',
    '|---|---|---|---|---|',
  );
  for (const t of r.targets) {
    out.push(
      `| ${t.target} | ${t.limit} | ${t.measured} | ${t.pass === null ? 'not measured' : t.pass ? 'pass' : '**FAIL**'} | ${t.beside ?? ''} |`,
    );
  }
  // What a hop costs on this machine with no guard at all, and a hop with the waits every call
  // recorded before it is forwarded has: the parts of "added" the daemon's code cannot remove.
  out.push(
    '',
    'The floors, over direct in the same run: *node:http*, a `node:http` + undici pass-through; *floor* (the Fastify floor), ' +
      'Fastify + undici, no guards or records; *I/O*, the Fastify floor waiting on one Redis read and one Postgres commit before ' +
      "it forwards (what a call recorded before it is forwarded waits on this machine, with nothing else done). *Portkey*: Portkey's " +
      'open-source gateway (`@portkey-ai/gateway --headless`), routed to the same upstream by `x-portkey-provider: openai` and ' +
      "`x-portkey-custom-host`. *By round*: the same ratio from each round's pair of cells alone; a pooled ratio past its limit " +
      'while rounds fall on both sides of it is the hour as much as the history.',
    '',
  );
  if (r.proxy?.length) {
    out.push(
      '### Proxy: non-streaming chat completions',
      '',
      'Each group of rows is one cell (upstream delay, connections), its systems measured in alternating rounds. ' +
        'Throughput in requests/s; latency in ms; "added" is the percentile minus the same percentile of direct.',
      '',
      '| upstream, conns | system | req/s | x floor | p50 / p90 / p99 | added p50 / p99 |',
      '|---|---|---|---|---|---|',
    );
    for (const p of r.proxy) {
      const systems: [string, CellResult | undefined, Added | undefined][] = [
        ['direct', p.direct, undefined],
        ['node:http floor', p.httpFloor, p.httpFloorAdded],
        ['floor (Fastify)', p.floor, p.floorAdded],
        ['I/O floor', p.ioFloor, p.ioFloorAdded],
        ['sidecar', p.sidecar, p.sidecarAdded],
        ['sidecar, a run per call', p.sidecarPerCallRun, p.sidecarPerCallRunAdded],
        ['sidecar, baseline build', p.sidecarBaseline, p.sidecarBaselineAdded],
        ['Portkey', p.portkey, p.portkeyAdded],
      ];
      for (const [name, cell, add] of systems) {
        if (!cell) continue;
        out.push(
          `| ${p.upstreamDelayMs ?? '?'} ms, ${p.connections} | ${name} | ${f(cell.rps, 0)} | ${f(cell.rps / p.floor.rps, 3)} | ` +
            `${f(cell.latency.p50)} / ${f(cell.latency.p90)} / ${f(cell.latency.p99)} | ${add ? `${signed(add.p50)} / ${signed(add.p99)}` : ''} |`,
        );
      }
    }
    out.push('');
  }
  if (r.sse?.length) {
    out.push(
      '### SSE streams (chat completions, `stream: true`)',
      '',
      'Time to first body byte (TTFB) and to the last (TTLB), in ms, measured with undici; added = minus direct.',
      '',
      '| upstream, conns | system | streams/s | TTFB p50 / p99 | added TTFB p50 / p99 | added TTLB p50 / p99 |',
      '|---|---|---|---|---|---|',
    );
    for (const s of r.sse) {
      const systems: [string, StreamTimes | undefined, StreamAdded | undefined][] = [
        ['direct', s.direct, undefined],
        ['node:http floor', s.httpFloor, s.httpFloorAdded],
        ['floor (Fastify)', s.floor, s.floorAdded],
        ['I/O floor', s.ioFloor, s.ioFloorAdded],
        ['sidecar', s.sidecar, s.sidecarAdded],
        ['sidecar, baseline build', s.sidecarBaseline, s.sidecarBaselineAdded],
        ['Portkey', s.portkey, s.portkeyAdded],
      ];
      for (const [name, times, add] of systems) {
        if (!times) continue;
        out.push(
          `| ${s.upstreamDelayMs ?? '?'} ms, ${s.connections} | ${name} | ${f(times.ops, 0)} | ${f(times.ttfb.p50)} / ${f(times.ttfb.p99)} | ` +
            (add
              ? `${signed(add.ttfb.p50)} / ${signed(add.ttfb.p99)} | ${signed(add.ttlb.p50)} / ${signed(add.ttlb.p99)} |`
              : `TTLB ${f(times.ttlb.p50)} / ${f(times.ttlb.p99)} | |`),
        );
      }
    }
    out.push('');
  }
  if (r.api?.length) {
    out.push(
      '### Run API pairs',
      '',
      'Pairs per second and pair latency (ms). The baseline is two no-op round trips to a plain node:http server; "x base" is pairs/s over the baseline\'s pairs/s.',
      '',
      '| conns | baseline pairs/s | run start+end /s (x base) | run pair p50 / p90 / p99 | step create+patch /s (x base) | step pair p50 / p90 / p99 |',
      '|---|---|---|---|---|---|',
    );
    for (const a of r.api) {
      out.push(
        `| ${a.connections} | ${f(a.baseline.ops, 0)} | ${f(a.runPairs.ops, 0)} (${f(a.runPairsVsBaseline, 3)}) | ${f(a.runPairs.latency.p50)} / ${f(a.runPairs.latency.p90)} / ${f(a.runPairs.latency.p99)} | ` +
          `${f(a.stepPairs.ops, 0)} (${f(a.stepPairsVsBaseline, 3)}) | ${f(a.stepPairs.latency.p50)} / ${f(a.stepPairs.latency.p90)} / ${f(a.stepPairs.latency.p99)} |`,
      );
    }
    out.push('');
  }
  if (r.rss) {
    out.push(
      '### Daemon memory',
      '',
      `RSS 2 s after start ${f(r.rss.atStartMb, 1)} MB; idle ${r.rss.idleSeconds} s ` +
        `${f(r.rss.idleMb, 1)} MB (every 5 s: ${r.rss.idleSamplesMb.join(', ')}); peak under load ${f(r.rss.underLoadPeakMb, 1)} MB; ` +
        `idle ${r.rss.idleSeconds} s after the load ${f(r.rss.idleAfterLoadMb, 1)} MB (every 5 s: ${r.rss.idleAfterLoadSamplesMb.join(', ')}).`,
      '',
    );
    if (r.rss.idleBreakdown && r.rss.idleAfterLoadBreakdown) {
      out.push(
        `Idle after start: ${formatBreakdown(r.rss.idleBreakdown)}. Idle after the load: ${formatBreakdown(r.rss.idleAfterLoadBreakdown)}.`,
        '',
      );
    }
  }
  if (r.history) {
    const h = r.history;
    out.push(
      '### History',
      '',
      `Seeded ${h.seeded.runs.toLocaleString('en')} runs and ${h.seeded.steps.toLocaleString('en')} steps in ${h.seeded.seconds} s; ${h.rounds} alternating rounds, 1 connection. Latency in ms.`,
      '',
      '| | empty p50 / p99 | seeded p50 / p99 | seeded / empty (p50, p99) |',
      '|---|---|---|---|',
      `| step creation | ${f(h.empty.stepCreate.p50)} / ${f(h.empty.stepCreate.p99)} | ${f(h.full.stepCreate.p50)} / ${f(h.full.stepCreate.p99)} | ${f(h.ratios.stepCreateP50, 3)}, ${f(h.ratios.stepCreateP99, 3)} |`,
      `| run list, first page | ${f(h.empty.runList.p50)} / ${f(h.empty.runList.p99)} | ${f(h.full.runList.p50)} / ${f(h.full.runList.p99)} | ${f(h.full.runList.p50 / h.empty.runList.p50, 3)}, ${f(h.ratios.runListP99, 3)} |`,
      `| run detail, 1,000 steps | ${f(h.empty.runDetail.p50)} / ${f(h.empty.runDetail.p99)} | ${f(h.full.runDetail.p50)} / ${f(h.full.runDetail.p99)} | ${f(h.full.runDetail.p50 / h.empty.runDetail.p50, 3)}, ${f(h.ratios.runDetailP99, 3)} |`,
      '',
    );
    // Absent from results written before it was kept.
    if (h.stepCreateP50ByRound?.length) {
      out.push(
        `Step creation p50, seeded / empty, round by round (each round's two cells): ${h.stepCreateP50ByRound.map((x) => `x${f(x, 3)}`).join(', ')}.`,
        '',
      );
    }
    const l = h.largeRun;
    if (l) {
      out.push(
        `A run of ${l.steps.toLocaleString('en')} steps (${f(l.bytes / 1e6, 1)} MB of JSON) read once from the seeded daemon, to the last byte, ` +
          `in ${f(l.ms, 0)} ms: the daemon's RSS ${f(l.rssBeforeMb, 1)} MB before, ${f(l.rssPeakMb, 1)} MB at its peak (sampled every 20 ms), ${f(l.rssAfterMb, 1)} MB right after.`,
        '',
      );
    }
  }
  if (r.budgets) {
    out.push('### Budgets (rule 13): 0 against 5 applicable budgets', '', ...budgetsMarkdown(r.budgets), '');
  }
  if (r.soak) {
    const s = r.soak;
    out.push(
      '### Soak (issue #49)',
      '',
      `${s.minutes} minutes of ${s.scenario}: half the maximum of ${f(s.maximum.callsPerSecond, 0)} calls/s (${s.maximum.source}); ` +
        `sent ${f(s.sentRate, 1)}/s, answered ${f(s.ops, 1)}/s; peak RSS ${f(s.peakRssMb, 1)} MB; load average ` +
        `${s.loadavg.start.map((x) => x.toFixed(1)).join(' ')} at the start, ${s.loadavg.end.map((x) => x.toFixed(1)).join(' ')} at the end.`,
      '',
      ...(s.perMinute.length
        ? [
            '| minute | calls | errors | p50 / p99 ms | RSS mean / max MB | daemon CPU µs a call | load |',
            '|---|---|---|---|---|---|---|',
          ]
        : []),
      ...s.perMinute.map(
        (m) =>
          `| ${m.minute + 1} | ${m.calls} | ${m.errors} | ${f(m.p50)} / ${f(m.p99)} | ${f(m.rssMb, 1)} / ${f(m.rssMaxMb, 1)} | ${m.cpuUsPerCall} | ${f(m.load, 1)} |`,
      ),
      '',
      ...soakVerdictLines(s).map((line) => `- ${line}`),
      '',
    );
  }
  return out.join('\n');
}

const START = '<!-- bench:results:start -->';
const END = '<!-- bench:results:end -->';
const OTEL_START = '<!-- bench:otel:start -->';
const OTEL_END = '<!-- bench:otel:end -->';

/** `readme` with what lies between the markers replaced by `body`. */
function between(readme: string, start: string, end: string, body: string): string {
  const a = readme.indexOf(start);
  const b = readme.indexOf(end);
  if (a < 0 || b < a) throw new Error(`bench/README.md lacks the ${start} ... ${end} markers`);
  const generated = `${start}\n<!-- Generated by \`npm run bench\`; edits between these markers are overwritten. -->\n\n${body}\n${end}`;
  return readme.slice(0, a) + generated + readme.slice(b + end.length);
}

export async function writeReport(benchDir: string, report: BenchReport): Promise<string> {
  const resultsDir = join(benchDir, 'results');
  await mkdir(resultsDir, { recursive: true });
  const file = join(resultsDir, `${report.date.replace(/:/g, '-').replace(/\.\d+Z$/, 'Z')}.json`);
  await writeFile(file, `${JSON.stringify(report, null, 2)}\n`);
  const readmePath = join(benchDir, 'README.md');
  let readme = await readFile(readmePath, 'utf8');
  // An OpenTelemetry-only run (`--only otel`) leaves the other results as they are.
  const onlyOtel = Object.keys(report).every(
    (key) => !['proxy', 'sse', 'api', 'budgets', 'rss', 'history', 'soak'].includes(key),
  );
  if (!onlyOtel) readme = between(readme, START, END, markdown(report));
  if (report.otel) {
    const head = `Run of ${report.date} on ${report.machine.cpus} CPUs, Node ${report.machine.node}; options: \`${JSON.stringify(report.options)}\`.`;
    readme = between(readme, OTEL_START, OTEL_END, [head, '', ...otelMarkdown(report.otel)].join('\n'));
  }
  await writeFile(readmePath, readme);
  return file;
}
