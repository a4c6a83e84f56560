/**
 * `npm run bench`: starts what it needs on this machine (a fresh Postgres database and Redis key
 * prefix, fake OpenAI upstreams, bare pass-through proxies, Portkey's gateway, the real daemon),
 * drives load, and writes bench/results/<date>.json and the tables in bench/README.md.
 *
 *   --duration <s>          seconds per measured cell (default 5, in --rounds pieces; each cell also warms up)
 *   --connections <list>    concurrent connections (default 1,16,64)
 *   --only <list>           any of api, proxy, sse, budgets, history, otel, soak (default: the first five);
 *                           `targets` is proxy,sse on the cells the targets read (--cells 20@16,0@64), and
 *                           budgets; `otel` is the proxy path with OpenTelemetry off, on, and (--baseline-root)
 *                           before it
 *   --soak <minutes>        add issue #49's soak: the proxy at half its maximum calls/s (this run's 0 ms,
 *                           64-connection sidecar cell, else measured first), paced, for that long; RSS,
 *                           p50/p99, errors per minute; flat, no error, every call recorded (bench/lib/soak.ts);
 *                           `--only soak` runs it alone (30 minutes unless --soak says)
 *   --upstream-delay <list> the fake upstreams' fixed delays before answering, in ms (default 0,20);
 *                           proxy and SSE cells are measured at each delay and connection count
 *   --cells <list>          instead: only these proxy and SSE cells, as <delay ms>@<connections>
 *   --history-runs <n>      runs seeded for the history check (default 50500: ~1,000,000 steps)
 *   --rounds <n>            alternating rounds: the pieces each cell is measured in, and the history check's (default 4)
 *   --cpu-prof              profile the daemon (node --cpu-prof) into bench/profiles/
 *   --no-build              do not compile src/ first (the daemon runs from dist/)
 *   --daemon-root <dir>     run the daemon of another (built) checkout, for before/after runs
 *   --baseline-root <dir>   also run the daemon of another (built) checkout, measured as one more
 *                           system in the same proxy and SSE rounds: a before/after in one run
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { budgetsScenario } from './lib/budgets.js';
import { createServices, type BenchServices } from './lib/database.js';
import { historyScenario, prepareHistory } from './lib/history.js';
import { pool } from './lib/loops.js';
import {
  buildDaemon,
  startPortkey,
  formatBreakdown,
  idleRssMb,
  memoryBreakdown,
  ROOT,
  rssMb,
  rssSampler,
  startDaemon,
  startHelper,
  type Child,
  type DaemonProcess,
} from './lib/processes.js';
import { checkTargets, writeReport, type BenchReport } from './lib/report.js';
import { soak, type SoakResult } from './lib/soak.js';
import {
  apiHeaders,
  apiScenario,
  chatTarget,
  probeProxy,
  proxyScenario,
  setPricing,
  sseScenario,
  startRuns,
  type Endpoints,
  type ProxyCell,
  type ProxyRow,
  type UpstreamEndpoints,
} from './lib/scenarios.js';
import { round } from './lib/stats.js';
import { otelCell, startOtlpSink, type OtelArm, type OtelReport } from './lib/otel.js';

const SCENARIOS = ['api', 'proxy', 'sse', 'budgets', 'history', 'otel', 'soak'] as const;
type Scenario = (typeof SCENARIOS)[number];
/** What a run measures unless told: `otel` is asked for by name (bench/lib/otel.ts). */
const DEFAULT_SCENARIOS: readonly Scenario[] = ['api', 'proxy', 'sse', 'budgets', 'history'];
/** The cells the issue's targets are read from: latency at 20 ms and 16 connections, throughput at 0 ms and 64. */
const TARGET_CELLS = '20@16,0@64';

const { values: flags } = parseArgs({
  options: {
    duration: { type: 'string', default: '5' },
    connections: { type: 'string', default: '1,16,64' },
    only: { type: 'string', default: DEFAULT_SCENARIOS.join(',') },
    soak: { type: 'string' },
    'upstream-delay': { type: 'string', default: '0,20' },
    cells: { type: 'string' },
    'history-runs': { type: 'string', default: '50500' },
    'history-users': { type: 'string', default: '500' },
    rounds: { type: 'string', default: '4' },
    'cpu-prof': { type: 'boolean', default: false },
    'no-build': { type: 'boolean', default: false },
    'daemon-root': { type: 'string' },
    'baseline-root': { type: 'string' },
  },
});

const positive = (name: string, raw: string | undefined): number => {
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number (got ${raw})`);
  return n;
};
const durationS = positive('duration', flags.duration);
const connections = flags.connections.split(',').map((c) => Math.round(positive('connections', c)));
const onlyTargets = flags.only.trim() === 'targets';
const only = new Set((onlyTargets ? 'proxy,sse,budgets' : flags.only).split(',').map((s) => s.trim()) as Scenario[]);
for (const s of only)
  if (!SCENARIOS.includes(s)) throw new Error(`--only takes ${SCENARIOS.join('|')} or targets (got ${s})`);
/** Issue #49's soak lasts 30 minutes: `--only soak` runs it alone, for that long unless told. */
const soakMinutes = flags.soak !== undefined ? positive('soak', flags.soak) : only.has('soak') ? 30 : 0;
const delay = (raw: string): number => {
  const ms = Number(raw);
  if (!Number.isInteger(ms) || ms < 0)
    throw new Error(`an upstream delay must be whole milliseconds >= 0 (got ${raw})`);
  return ms;
};
const cellsFlag = flags.cells ?? (onlyTargets ? TARGET_CELLS : undefined);
const proxyCells: ProxyCell[] = cellsFlag
  ? cellsFlag.split(',').map((cell) => {
      const [delayMs, conns] = cell.trim().split('@');
      if (conns === undefined) throw new Error(`--cells takes <delay ms>@<connections> (got ${cell})`);
      return { delayMs: delay(delayMs!), connections: Math.round(positive('cells', conns)) };
    })
  : flags['upstream-delay']
      .split(',')
      .map(delay)
      .flatMap((delayMs) => connections.map((c) => ({ delayMs, connections: c })));
const upstreamDelaysMs = [...new Set(proxyCells.map((cell) => cell.delayMs))];
const historyRuns = Math.round(positive('history-runs', flags['history-runs']));
const historyUsers = Math.round(positive('history-users', flags['history-users']));
const rounds = Math.round(positive('rounds', flags.rounds));
if (rounds < 1) throw new Error(`--rounds must be at least 1 (got ${flags.rounds})`);

const log = (line: string) => process.stdout.write(`${line}\n`);
const cleanups: (() => Promise<unknown>)[] = [];
const cleanup = async () => {
  for (const fn of cleanups.reverse()) await fn().catch((e: unknown) => log(`cleanup: ${(e as Error).message}`));
  cleanups.length = 0;
};
process.once('SIGINT', () => void cleanup().finally(() => process.exit(130)));

/** The daemon's provider name for the upstream of this delay (an `openai` type, in RUNGUARD_PROVIDERS). */
const providerName = (delayMs: number) => `bench-${delayMs}ms`;

async function daemonWithDatabase(
  upstreams: Child[],
  profileDir?: string,
  root = flags['daemon-root'],
  env?: Record<string, string>,
): Promise<{ daemon: DaemonProcess; services: BenchServices }> {
  const services = await createServices();
  cleanups.push(() => services.drop());
  const dataDir = await mkdtemp(join(tmpdir(), 'runguard-bench-'));
  cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
  const daemon = await startDaemon({
    databaseUrl: services.databaseUrl,
    redisUrl: services.redisUrl,
    redisKeyPrefix: services.redisKeyPrefix,
    dataDir,
    openaiUpstream: `${upstreams[0]!.url}/v1`,
    providers: Object.fromEntries(
      upstreams.map((u, i) => [
        providerName(upstreamDelaysMs[i]!),
        { type: 'openai' as const, upstream: `${u.url}/v1` },
      ]),
    ),
    ...(profileDir ? { cpuProfDir: profileDir } : {}),
    ...(root ? { root } : {}),
    ...(env ? { env } : {}),
  });
  cleanups.push(() => daemon.stop());
  return { daemon, services };
}

async function main(): Promise<void> {
  if (!flags['no-build']) {
    log('building src/ (tsc)...');
    buildDaemon();
  }
  const report: BenchReport = {
    date: new Date().toISOString(),
    machine: { cpus: cpus().length, node: process.version, loadavgAtStart: loadavg() },
    options: {
      durationS,
      connections,
      only: [...only],
      soakMinutes,
      upstreamDelaysMs,
      proxyCells: proxyCells.map((cell) => `${cell.delayMs}@${cell.connections}`),
      historyRuns,
      rounds,
      cpuProf: flags['cpu-prof'],
      ...(flags['daemon-root'] ? { daemonRoot: flags['daemon-root'] } : {}),
      ...(flags['baseline-root'] ? { baselineRoot: flags['baseline-root'] } : {}),
    },
    targets: [],
  };
  // One fake upstream per delay, each in a process of its own like the one before.
  const upstreams: Child[] = [];
  for (const delayMs of upstreamDelaysMs) {
    const upstream = await startHelper('upstream-server.ts', [String(delayMs), '1']);
    cleanups.push(() => upstream.stop());
    upstreams.push(upstream);
  }
  const needsMain = only.has('api') || only.has('proxy') || only.has('sse') || only.has('budgets') || soakMinutes > 0;
  if (needsMain) {
    const profileDir = flags['cpu-prof'] ? join(ROOT, 'bench', 'profiles') : undefined;
    const { daemon, services } = await daemonWithDatabase(upstreams, profileDir);
    const perUpstream: UpstreamEndpoints[] = [];
    for (const [i, upstream] of upstreams.entries()) {
      const delayMs = upstreamDelaysMs[i]!;
      const floor = await startHelper('floor-proxy.ts', [upstream.url]);
      cleanups.push(() => floor.stop());
      const httpFloor = await startHelper('floor-http-proxy.ts', [upstream.url]);
      cleanups.push(() => httpFloor.stop());
      // In the daemon's database and under its Redis prefix: the same servers, tables of its own.
      const ioFloor = await startHelper('floor-proxy.ts', [
        upstream.url,
        '--io',
        services.databaseUrl,
        services.redisUrl,
        `${services.redisKeyPrefix}floor-io:`,
      ]);
      cleanups.push(() => ioFloor.stop());
      perUpstream.push({
        delayMs,
        upstream: upstream.url,
        floor: floor.url,
        httpFloor: httpFloor.url,
        ioFloor: ioFloor.url,
        provider: providerName(delayMs),
      });
      log(
        `upstream ${upstream.url} (delay ${delayMs} ms): floor ${floor.url}; node:http floor ${httpFloor.url}; I/O floor ${ioFloor.url}`,
      );
    }
    const portkey = await startPortkey();
    cleanups.push(() => portkey.stop());
    log(`daemon pid ${daemon.pid} at ${daemon.url}; Portkey's gateway pid ${portkey.pid} at ${portkey.url}`);
    await setPricing(daemon);
    const probe = await probeProxy(daemon);
    report.proxyProbe = probe;
    if (!probe.available) log(`\n*** ${probe.note} ***\n`);
    const runId = (await startRuns(pool(daemon.url, 1), apiHeaders(daemon), 1, 'bench-proxy-run'))[0]!;
    const endpoints: Endpoints = { upstreams: perUpstream, portkey: portkey.url, daemon, runId };
    if (flags['baseline-root'] && probe.available) {
      // Its own database, as the daemon's: only the build differs.
      const baseline = await daemonWithDatabase(upstreams, undefined, flags['baseline-root']);
      await setPricing(baseline.daemon);
      const baselineRun = (
        await startRuns(pool(baseline.daemon.url, 1), apiHeaders(baseline.daemon), 1, 'bench-proxy-run')
      )[0]!;
      endpoints.baseline = { daemon: baseline.daemon, runId: baselineRun };
      log(`baseline daemon (${flags['baseline-root']}) pid ${baseline.daemon.pid} at ${baseline.daemon.url}`);
    }

    await sleep(2_000);
    const atStartMb = await rssMb(daemon.pid);
    const idle = await idleRssMb(daemon.pid);
    // Read after the last sample: the scrape it takes is not in any reading.
    const idleBreakdown = await memoryBreakdown(daemon);
    log(`daemon RSS: ${atStartMb.toFixed(1)} MB 2 s after start; idle, every 5 s: ${idle.samples.join(', ')} MB`);
    log(`  idle: ${formatBreakdown(idleBreakdown)}`);
    const sampler = rssSampler(daemon.pid);
    if (only.has('api')) report.api = await apiScenario(endpoints, connections, durationS, rounds, log);
    const scenarioOptions = { endpoints, withSidecar: probe.available, proxyCells, durationS, rounds, log };
    if (only.has('proxy')) report.proxy = await proxyScenario(scenarioOptions);
    if (only.has('sse')) report.sse = await sseScenario(scenarioOptions);
    if (only.has('budgets')) {
      // Rule 13's cost: 0 against 5 budgets on the daemon (and the baseline build, in the same rounds).
      const provider = providerName(Math.min(...upstreamDelaysMs));
      report.budgets = await budgetsScenario({
        systems: [
          { label: 'sidecar', daemon, provider },
          ...(endpoints.baseline
            ? [{ label: 'sidecar, baseline build', daemon: endpoints.baseline.daemon, provider }]
            : []),
        ],
        connections,
        rounds,
        pieceS: Math.max(2, durationS / rounds),
        log,
      });
    }
    // A soak alone is the run's load: the peak is its, and the idle reading after it is after the soak.
    const soakIsTheLoad = !(['api', 'proxy', 'sse', 'budgets'] as const).some((s) => only.has(s));
    const runSoak = async () => {
      if (!probe.available) log('soak: not run: this build has no proxy route');
      else report.soak = await soakAtHalf(endpoints, services.databaseUrl, report.proxy);
    };
    if (soakMinutes > 0 && soakIsTheLoad) await runSoak();
    const { peak } = sampler.stop();
    const afterLoad = await idleRssMb(daemon.pid);
    const afterLoadBreakdown = await memoryBreakdown(daemon);
    report.rss = {
      atStartMb: round(atStartMb, 1),
      idleSeconds: afterLoad.samples.length * 5 - 5,
      idleMb: idle.mb,
      underLoadPeakMb: round(peak, 1),
      idleAfterLoadMb: afterLoad.mb,
      idleSamplesMb: idle.samples,
      idleAfterLoadSamplesMb: afterLoad.samples,
      idleBreakdown,
      idleAfterLoadBreakdown: afterLoadBreakdown,
    };
    log(
      `daemon RSS: peak under load ${report.rss.underLoadPeakMb} MB; idle after the load, every 5 s: ${afterLoad.samples.join(', ')} MB`,
    );
    log(`  idle after the load: ${formatBreakdown(afterLoadBreakdown)}`);

    if (soakMinutes > 0 && !soakIsTheLoad) await runSoak();
    await daemon.stop();
    if (profileDir) log(`CPU profile written to ${profileDir} (summarize: npx tsx bench/profile-summary.ts <file>)`);
  }
  if (only.has('otel')) report.otel = await otelComparison(upstreams);
  if (only.has('history')) {
    const empty = await daemonWithDatabase(upstreams);
    const full = await daemonWithDatabase(upstreams);
    const e = await prepareHistory(empty.daemon, empty.services.databaseUrl, null, log);
    const f = await prepareHistory(
      full.daemon,
      full.services.databaseUrl,
      { runs: historyRuns, users: historyUsers },
      log,
    );
    report.history = await historyScenario(e.target, f.target, f.seeded, rounds, Math.max(2, durationS / 2), log);
  }
  report.targets = checkTargets(report);
  for (const t of report.targets)
    log(`${t.pass === null ? 'n/a ' : t.pass ? 'pass' : 'FAIL'}  ${t.target}: ${t.measured} (${t.limit})`);
  const file = await writeReport(join(ROOT, 'bench'), report);
  log(`results: ${file} and bench/README.md`);
}

/** Connections of the cell the soak's maximum is read from (issue #49: "half the measured maximum"). */
const SOAK_CONNECTIONS = 64;

/**
 * Issue #49's soak (bench/lib/soak.ts) on the fastest upstream, at half the sidecar's calls/s in
 * this run's own cell at that upstream and 64 connections, or, without that cell, at half of what
 * the soak measures first.
 */
async function soakAtHalf(e: Endpoints, databaseUrl: string, proxy: ProxyRow[] | undefined): Promise<SoakResult> {
  const delayMs = Math.min(...upstreamDelaysMs);
  const cell = proxy?.find((row) => row.upstreamDelayMs === delayMs && row.connections === SOAK_CONNECTIONS);
  return soak({
    daemon: e.daemon,
    databaseUrl,
    provider: providerName(delayMs),
    minutes: soakMinutes,
    connections: SOAK_CONNECTIONS,
    ...(cell?.sidecar
      ? {
          maximum: {
            callsPerSecond: round(cell.sidecar.rps, 1),
            source: `this run's sidecar cell, ${delayMs} ms upstream, ${SOAK_CONNECTIONS} connections`,
          },
        }
      : {}),
    log,
  });
}

/**
 * The proxy path with OpenTelemetry off, on (to a loopback collector), and before it landed
 * (`--baseline-root`): each a daemon of its own, on the proxy cells, alternated (bench/lib/otel.ts).
 */
async function otelComparison(upstreams: Child[]): Promise<OtelReport> {
  const start = loadavg();
  const sink = await startOtlpSink();
  cleanups.push(() => sink.close());
  const wanted: [OtelArm['name'], string | undefined, Record<string, string> | undefined][] = [
    ['off', flags['daemon-root'], undefined],
    ['on', flags['daemon-root'], { OTEL_EXPORTER_OTLP_ENDPOINT: sink.url, OTEL_SERVICE_NAME: 'runguard-bench' }],
    ...(flags['baseline-root']
      ? [['pre-otel', flags['baseline-root'], undefined] as [OtelArm['name'], string, undefined]]
      : []),
  ];
  const started: { name: OtelArm['name']; daemon: DaemonProcess; runId: string }[] = [];
  for (const [name, root, env] of wanted) {
    const { daemon } = await daemonWithDatabase(upstreams, undefined, root, env);
    await setPricing(daemon);
    const api = pool(daemon.url, 1);
    const runId = (await startRuns(api, apiHeaders(daemon), 1, `bench-otel-${name}`))[0]!;
    await api.close();
    started.push({ name, daemon, runId });
    log(`otel arm ${name}: daemon pid ${daemon.pid} at ${daemon.url}${root ? ` (${root})` : ''}`);
  }
  const cells = [];
  for (const cell of proxyCells) {
    const arms = started.map(({ name, daemon, runId }) => ({
      name,
      daemon,
      target: chatTarget(daemon, runId, undefined, providerName(cell.delayMs)),
    }));
    cells.push(await otelCell(arms, cell, rounds, durationS, log));
  }
  log(
    `otel: the collector received ${sink.received.traceRequests} trace and ${sink.received.metricRequests} metric exports`,
  );
  if (sink.received.traceRequests === 0)
    log('*** otel: the `on` daemon exported no trace: its figures are not OpenTelemetry on ***');
  return {
    arms: started.map((arm) => arm.name),
    cells,
    collector: { ...sink.received },
    loadavg: { start, end: loadavg() },
  };
}

try {
  await main();
} catch (error) {
  log(`bench failed: ${(error as Error).stack ?? error}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
