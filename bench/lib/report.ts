/** The results file and the markdown tables regenerated into bench/README.md. */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { HistoryResult } from './history.js';
import { formatBreakdown, type MemoryBreakdown } from './processes.js';
import type { ProxyProbe, ApiRow, ProxyRow, SseRow } from './scenarios.js';

export interface SoakResult {
  minutes: number;
  scenario: string;
  /** Mean RSS (MB) of each minute. */
  perMinuteMb: number[];
  /** Last minute's mean over the second minute's (the first is warm-up). */
  growthRatio: number;
  ops: number;
}

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
  soak?: SoakResult;
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
  const at = <T extends { connections: number }>(rows: T[] | undefined, c: number): T | undefined =>
    rows?.find((x) => x.connections === c);
  const p16 = at(r.proxy, 16);
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
  const floors = (bare: number | undefined, io: number | undefined) =>
    bare === undefined ? undefined : `bare ${signed(bare)} ms, I/O ${signed(io)} ms`;
  add(
    'Sidecar added latency over direct, p50, 16 connections',
    '<= 1 ms',
    p16?.sidecarAdded?.p50,
    (v) => v <= 1,
    ' ms',
    floors(p16?.floorAdded.p50, p16?.ioFloorAdded.p50),
  );
  add(
    'Sidecar added latency over direct, p99, 16 connections',
    '<= 3 ms',
    p16?.sidecarAdded?.p99,
    (v) => v <= 3,
    ' ms',
    floors(p16?.floorAdded.p99, p16?.ioFloorAdded.p99),
  );
  const s = at(r.sse, 16) ?? r.sse?.[r.sse.length - 1];
  add(
    `SSE added time to first byte, p99, ${s?.connections ?? 16} connections`,
    '<= 2 ms',
    s?.sidecarAdded?.ttfb.p99,
    (v) => v <= 2,
    ' ms',
    floors(s?.floorAdded.ttfb.p99, s?.ioFloorAdded.ttfb.p99),
  );
  const p64 = at(r.proxy, 64);
  add(
    'Sidecar throughput / floor throughput, 64 connections',
    '>= 0.50',
    p64?.sidecarVsFloorRps,
    (v) => v >= 0.5,
    '',
    p64 ? `I/O ${f(p64.ioFloor.rps / p64.floor.rps, 3)}` : undefined,
  );
  add(`Daemon RSS idle (${r.rss?.idleSeconds ?? 60} s after start)`, '<= 90 MB', r.rss?.idleMb, (v) => v <= 90, ' MB');
  add(
    `Daemon RSS idle (${r.rss?.idleSeconds ?? 60} s after the load)`,
    '<= 90 MB',
    r.rss?.idleAfterLoadMb,
    (v) => v <= 90,
    ' MB',
  );
  add('Daemon RSS under load (peak)', '<= 150 MB', r.rss?.underLoadPeakMb, (v) => v <= 150, ' MB');
  add(
    `RSS growth over a ${r.soak?.minutes ?? 5}-minute soak (last minute / second minute)`,
    '<= 1.05',
    r.soak?.growthRatio,
    (v) => v <= 1.05,
    '',
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
  // What a hop costs on this machine with no guard at all, and a hop with the waits every guarded
  // call must have: the parts of "added" the daemon's code cannot remove.
  out.push(
    '',
    'The floors, over direct in the same run: *bare*, a pass-through proxy with no guards or records; *I/O*, ' +
      'the same proxy waiting on one Redis read and one Postgres commit before it forwards (what a call recorded before it ' +
      "is forwarded waits on this machine, with nothing else done). *By round*: the same ratio from each round's pair of " +
      'cells alone; a pooled ratio past its limit while rounds fall on both sides of it is the hour as much as the history.',
  );
  const floor16 = r.proxy?.find((p) => p.connections === 16);
  if (floor16?.sidecar) {
    out.push(
      `The daemon's own share at 16 connections (sidecar minus I/O floor): p50 ${signed(floor16.sidecar.latency.p50 - floor16.ioFloor.latency.p50)} ms, ` +
        `p99 ${signed(floor16.sidecar.latency.p99 - floor16.ioFloor.latency.p99)} ms.`,
    );
  }
  out.push('');
  if (r.proxy?.length) {
    out.push(
      '### Proxy: non-streaming chat completions',
      '',
      'Throughput in requests/s; latency in ms; "added" is the percentile minus the same percentile of direct, in the same run.',
      '',
      '| conns | direct req/s | direct p50 / p90 / p99 | floor req/s (x direct) | floor added p50 / p99 | I/O floor req/s (x floor) | I/O floor added p50 / p99 | sidecar req/s (x floor) | sidecar p50 / p90 / p99 | sidecar added p50 / p99 | per-call run req/s | per-call run added p50 / p99 |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|',
    );
    for (const p of r.proxy) {
      out.push(
        `| ${p.connections} | ${f(p.direct.rps, 0)} | ${f(p.direct.latency.p50)} / ${f(p.direct.latency.p90)} / ${f(p.direct.latency.p99)} | ` +
          `${f(p.floor.rps, 0)} (${f(p.floorVsDirectRps)}) | ${signed(p.floorAdded.p50)} / ${signed(p.floorAdded.p99)} | ` +
          `${f(p.ioFloor.rps, 0)} (${f(p.ioFloor.rps / p.floor.rps)}) | ${signed(p.ioFloorAdded.p50)} / ${signed(p.ioFloorAdded.p99)} | ` +
          (p.sidecar
            ? `${f(p.sidecar.rps, 0)} (${f(p.sidecarVsFloorRps)}) | ${f(p.sidecar.latency.p50)} / ${f(p.sidecar.latency.p90)} / ${f(p.sidecar.latency.p99)} | ` +
              `${signed(p.sidecarAdded?.p50)} / ${signed(p.sidecarAdded?.p99)} | ${f(p.sidecarPerCallRun?.rps, 0)} | ${signed(p.sidecarPerCallRunAdded?.p50)} / ${signed(p.sidecarPerCallRunAdded?.p99)} |`
            : 'not measured | | | | |'),
      );
    }
    out.push('');
  }
  if (r.sse?.length) {
    out.push(
      '### SSE streams (chat completions, `stream: true`)',
      '',
      'Time to first body byte (TTFB) and to the last (TTLB), in ms, measured with undici; added = minus direct.',
      '',
      '| conns | streams/s direct | direct TTFB p50 / p99 | direct TTLB p50 / p99 | floor added TTFB p50 / p99 | I/O floor added TTFB p50 / p99 | sidecar added TTFB p50 / p99 | sidecar added TTLB p50 / p99 |',
      '|---|---|---|---|---|---|---|---|',
    );
    for (const s of r.sse) {
      out.push(
        `| ${s.connections} | ${f(s.direct.ops, 0)} | ${f(s.direct.ttfb.p50)} / ${f(s.direct.ttfb.p99)} | ${f(s.direct.ttlb.p50)} / ${f(s.direct.ttlb.p99)} | ` +
          `${signed(s.floorAdded.ttfb.p50)} / ${signed(s.floorAdded.ttfb.p99)} | ${signed(s.ioFloorAdded.ttfb.p50)} / ${signed(s.ioFloorAdded.ttfb.p99)} | ` +
          (s.sidecarAdded
            ? `${signed(s.sidecarAdded.ttfb.p50)} / ${signed(s.sidecarAdded.ttfb.p99)} | ${signed(s.sidecarAdded.ttlb.p50)} / ${signed(s.sidecarAdded.ttlb.p99)} |`
            : 'not measured | not measured |'),
      );
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
  if (r.soak) {
    out.push(
      '### Soak',
      '',
      `${r.soak.minutes} minutes of ${r.soak.scenario} (${f(r.soak.ops, 0)}/s): RSS per minute ${r.soak.perMinuteMb.map((x) => f(x, 1)).join(', ')} MB; last / second minute ${f(r.soak.growthRatio, 3)}.`,
      '',
    );
  }
  return out.join('\n');
}

const START = '<!-- bench:results:start -->';
const END = '<!-- bench:results:end -->';

export async function writeReport(benchDir: string, report: BenchReport): Promise<string> {
  const resultsDir = join(benchDir, 'results');
  await mkdir(resultsDir, { recursive: true });
  const file = join(resultsDir, `${report.date.replace(/:/g, '-').replace(/\.\d+Z$/, 'Z')}.json`);
  await writeFile(file, `${JSON.stringify(report, null, 2)}\n`);
  const readmePath = join(benchDir, 'README.md');
  const readme = await readFile(readmePath, 'utf8');
  const a = readme.indexOf(START);
  const b = readme.indexOf(END);
  if (a < 0 || b < a) throw new Error(`bench/README.md lacks the ${START} ... ${END} markers`);
  const generated = `${START}\n<!-- Generated by \`npm run bench\`; edits between these markers are overwritten. -->\n\n${markdown(report)}\n${END}`;
  await writeFile(readmePath, readme.slice(0, a) + generated + readme.slice(b + END.length));
  return file;
}
