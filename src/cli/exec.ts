/**
 * `runguard exec --user <id> -- <command...>`: runs an unmodified agent inside a guarded run. The
 * run is started first (a BLOCKED start never starts the command); the command gets provider base
 * URLs that proxy into that run by a run-scoped token; the run ends COMPLETED or FAILED by the
 * command's exit status, which becomes ours.
 */
import type { ProxyToken } from '../contract/proxy-tokens.js';
import type { RunCreated, RunLimitsRequest } from '../contract/runs.js';
import { tagsFromPairs } from '../contract/tag-pairs.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { basename } from 'node:path';
import { connectionReason, type RunDetail } from './api-client.js';
import { blockedSummary, execSummary } from './exec-summary.js';
import { newTraceparent, traceparentOf } from '../telemetry/telemetry.js';
import { colourWanted, createStyle } from './style.js';
import { DaemonUnreachableError, EXIT, keyHint, type ConnectionOrigin } from './errors.js';

/** Exit status when runguard itself failed (daemon unreachable, bad key, ...). */
export const EXIT_RUNGUARD_ERROR = 1;
/** The shell's status for a command that cannot be found or run. */
export const EXIT_NOT_RUNNABLE = 127;

/** Signals exec passes on to the command (and that, before it starts, stop exec setting it up). */
const HANDLED_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'];
/** What a terminal sends to its whole foreground process group (Ctrl-C, Ctrl-\). */
const TERMINAL_SIGNALS = new Set<NodeJS.Signals>(['SIGINT', 'SIGQUIT']);

/**
 * Whether exec's process group is its terminal's foreground group, the one a terminal's Ctrl-C
 * reaches as a whole: the command, in exec's group, then has that signal already, and a second
 * copy from exec would cut its clean-up short. On Linux from /proc/self/stat (after the name:
 * state, ppid, pgrp, session, tty_nr, tpgid); elsewhere, a terminal on stdin stands for it.
 */
function inTerminalForeground(): boolean {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const tpgid = Number(fields[5]);
    return tpgid > 0 && tpgid === Number(fields[2]);
  } catch {
    return process.stdin.isTTY === true;
  }
}

export interface ExecSettings {
  /** Daemon base URL. */
  url: string;
  /** The workspace's API key; the command does not get it. */
  apiKey: string;
  userId: string;
  metadata: Record<string, string>;
  /** The run's tags (`--tag key=value`); absent or empty: none. */
  tags?: Record<string, string>;
  command: string[];
  env: NodeJS.ProcessEnv;
  stderr: NodeJS.WritableStream;
  /** No summary line at the end (`--quiet`). */
  quiet?: boolean;
  /** The run's own limits (`--max-steps`, `--max-cost`, `--max-identical-calls`): tighter than the workspace's only. */
  limits?: RunLimitsRequest;
  /** Where the URL and the key came from: failures name them, as every command's do. */
  origin?: ConnectionOrigin;
}

export class ExecError extends Error {
  override name = 'ExecError';
}

/** `key=value` pairs into an object; a key without `=` is an error worth stopping for. */
export function parseMetadata(pairs: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const at = pair.indexOf('=');
    if (at < 1) throw new ExecError(`--metadata wants key=value, got "${pair}"`);
    out[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return out;
}

/** `--tag key=value` pairs as the run's tags, under the API's bounds: a bad one stops exec before anything starts. */
export function parseTags(pairs: readonly string[]): Record<string, string> {
  const read = tagsFromPairs(pairs);
  if ('problem' in read) throw new ExecError(`--tag: ${read.problem}`);
  return read.tags;
}

/**
 * The run's limits from exec's flags: counts are positive integers, the cost a non-negative USD
 * amount; a bad value is an error before anything starts.
 */
export function parseRunLimits(flags: {
  maxSteps?: string;
  maxCost?: string;
  maxIdenticalCalls?: string;
}): RunLimitsRequest {
  const count = (flag: string, value: string) => {
    if (!/^[1-9]\d{0,9}$/.test(value))
      throw new ExecError(`${flag} wants a whole number of at least 1, got "${value}"`);
    return Number(value);
  };
  const limits: RunLimitsRequest = {};
  if (flags.maxSteps !== undefined) limits.max_steps = count('--max-steps', flags.maxSteps);
  if (flags.maxIdenticalCalls !== undefined)
    limits.max_identical_calls = count('--max-identical-calls', flags.maxIdenticalCalls);
  if (flags.maxCost !== undefined) {
    const usd = Number(flags.maxCost.replace(/^\$/, ''));
    if (flags.maxCost.trim() === '' || !Number.isFinite(usd) || usd < 0)
      throw new ExecError(`--max-cost wants an amount in USD (e.g. 0.50), got "${flags.maxCost}"`);
    limits.max_cost_usd = usd;
  }
  return limits;
}

/** One API call, tried up to three times while the daemon is unreachable or failing (not once `interrupted`). */
async function call<T>(
  settings: ExecSettings,
  method: string,
  path: string,
  body?: unknown,
  interrupted: () => NodeJS.Signals | null = () => null,
  extraHeaders: Record<string, string> = {},
): Promise<{ status: number; body: T }> {
  const headers: Record<string, string> = { ...extraHeaders, authorization: `Bearer ${settings.apiKey}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  // Run starts are idempotent by key, so a retry after a lost answer cannot start a second run.
  if (method === 'POST') headers['idempotency-key'] = randomUUID();
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const res = await fetch(settings.url + path, {
        method,
        headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(10_000),
      });
      const text = await res.text();
      const parsed = (text ? JSON.parse(text) : null) as T;
      if (res.status >= 500 && attempt < 2) {
        lastError = new ExecError(`${method} ${path} answered ${res.status}`);
      } else {
        return { status: res.status, body: parsed };
      }
    } catch (error) {
      lastError = error;
    }
    if (interrupted()) break;
    await new Promise((resolve) => setTimeout(resolve, 200 * 2 ** attempt));
  }
  if (lastError instanceof ExecError) throw lastError;
  throw new DaemonUnreachableError(settings.url, connectionReason(lastError), settings.origin);
}

function failure(settings: ExecSettings, what: string, res: { status: number; body: unknown }): ExecError {
  const answer = res.body as { detail?: string; code?: string } | null;
  const detail = answer?.detail ?? 'no detail';
  const hint = res.status === 401 && settings.origin ? keyHint(settings.origin) : '';
  return new ExecError(
    `${what} failed (${res.status}${answer?.code ? ` ${answer.code}` : ''}): ${hint ? detail.replace(/\.$/, '') + hint : detail}`,
  );
}

/** Runs the command in a guarded run; resolves to the exit status to leave with. */
export async function runExec(settings: ExecSettings): Promise<number> {
  // Handled from the start: a signal before the command starts stops the setting up (the run, if
  // started, is ended FAILED, not left RUNNING); a second one leaves at once.
  let received: NodeJS.Signals | null = null;
  let child: ChildProcess | null = null;
  const onSignal = (signal: NodeJS.Signals) => {
    if (child && child.exitCode === null && child.signalCode === null) {
      if (!(TERMINAL_SIGNALS.has(signal) && inTerminalForeground())) child.kill(signal);
    } else if (child || received) {
      // The command is done and its run being ended, or a second signal while setting up: leave
      // now (the daemon's idle timeout ends a run left RUNNING).
      process.exit(128 + (constants.signals[signal] ?? 0));
    } else {
      received = signal;
    }
  };
  for (const signal of HANDLED_SIGNALS) process.on(signal, onSignal);
  try {
    return await guardedRun(
      settings,
      () => received,
      (spawned) => (child = spawned),
    );
  } finally {
    for (const signal of HANDLED_SIGNALS) process.off(signal, onSignal);
  }
}

async function guardedRun(
  settings: ExecSettings,
  interrupted: () => NodeJS.Signals | null,
  spawned: (child: ChildProcess) => void,
): Promise<number> {
  const stopBefore = async (runId: string | null): Promise<number | null> => {
    const signal = interrupted();
    if (!signal) return null;
    if (runId) await endRun(settings, runId, 'FAILED');
    settings.stderr.write(`runguard: ${signal} before the command started; it was not started.\n`);
    return 128 + (constants.signals[signal] ?? 0);
  };

  // The run's trace: exec's own (in the trace exec was given, if any), handed to the command as
  // TRACEPARENT, the OpenTelemetry convention for a trace context carried in the environment.
  const traceparent = runTraceparent(settings.env.TRACEPARENT);
  const started = await call<RunCreated>(
    settings,
    'POST',
    '/v1/runs',
    {
      user_id: settings.userId,
      metadata: settings.metadata,
      ...(settings.limits && Object.keys(settings.limits).length > 0 && { limits: settings.limits }),
      ...(settings.tags && Object.keys(settings.tags).length > 0 && { tags: settings.tags }),
    },
    interrupted,
    { traceparent },
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- rethrows the caught error as it is
  ).catch(async (error: unknown) => (await stopBefore(null)) ?? Promise.reject(error));
  if (typeof started === 'number') return started;
  if (started.status !== 201) throw failure(settings, 'starting the run', started);
  const run = started.body;
  if (run.status === 'BLOCKED') {
    settings.stderr.write(blockedSummary(run.id, run.decision.reason, stderrStyle(settings), run.decision.detail));
    return EXIT.BLOCKED;
  }

  let minted: { status: number; body: ProxyToken };
  try {
    minted = await call(settings, 'POST', `/v1/runs/${run.id}/proxy-token`, undefined, interrupted);
    if (minted.status !== 201) throw failure(settings, 'minting the proxy token', minted);
  } catch (error) {
    const stopped = await stopBefore(run.id);
    if (stopped !== null) return stopped;
    await endRun(settings, run.id, 'FAILED');
    throw error;
  }
  const stopped = await stopBefore(run.id);
  if (stopped !== null) return stopped;

  const env = commandEnv(settings, run.id, minted.body.urls);
  env.TRACEPARENT = traceparent;
  const [file, ...userArgs] = settings.command;
  const args = [...agentArgs(settings, file!, userArgs, minted.body.urls), ...userArgs];
  const outcome = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; spawnError?: Error }>(
    (done) => {
      const child = spawn(file!, args, { stdio: 'inherit', env });
      spawned(child);
      child.once('error', (spawnError) => done({ code: null, signal: null, spawnError }));
      child.once('exit', (code, signal) => done({ code, signal }));
    },
  );

  let status: number;
  if (outcome.spawnError) {
    settings.stderr.write(`runguard: cannot run ${file}: ${outcome.spawnError.message}\n`);
    status = EXIT_NOT_RUNNABLE;
  } else if (outcome.signal) {
    status = 128 + (constants.signals[outcome.signal] ?? 0);
  } else {
    status = outcome.code ?? EXIT_RUNGUARD_ERROR;
  }
  const ended = await endRun(settings, run.id, status === 0 ? 'COMPLETED' : 'FAILED');
  if (ended && !settings.quiet) await printSummary(settings, run.id, status);
  return status;
}

const stderrStyle = (settings: ExecSettings) => createStyle(colourWanted(settings.stderr, settings.env));

/**
 * The summary line, once the run's proxied results are recorded (each lands just after its answer,
 * so the last may still be on its way); after a few tries, as it stands.
 */
async function printSummary(settings: ExecSettings, runId: string, status: number): Promise<void> {
  try {
    let detail: RunDetail | null = null;
    for (let attempt = 0; attempt < 20; attempt++) {
      const res = await call<RunDetail>(settings, 'GET', `/v1/runs/${runId}`);
      if (res.status !== 200) return;
      detail = res.body;
      if (detail.steps.every((step) => step.status !== 'ALLOWED')) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    if (detail) settings.stderr.write(execSummary(detail, status, stderrStyle(settings)));
  } catch {
    // A summary is no reason to fail a command that ran: the run is recorded either way.
  }
}

/**
 * The command's environment: exec's own, with the run's proxy URLs as the provider SDKs' base
 * URLs, and without the workspace's API key, which it has no use for. (A command running as the
 * same user can still read the daemon's key file; only another user makes that a boundary.) A
 * base URL the user had set is replaced, and said so.
 */
function commandEnv(settings: ExecSettings, runId: string, urls: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...settings.env, RUNGUARD_RUN_ID: runId };
  delete env.RUNGUARD_API_KEY;
  for (const [name, provider, upstream] of [
    ['OPENAI_BASE_URL', 'openai', 'RUNGUARD_OPENAI_UPSTREAM'],
    ['ANTHROPIC_BASE_URL', 'anthropic', 'RUNGUARD_ANTHROPIC_UPSTREAM'],
    // Read by @google/genai (hence the Gemini CLI) for Gemini's own API.
    ['GOOGLE_GEMINI_BASE_URL', 'google', 'RUNGUARD_GOOGLE_UPSTREAM'],
  ] as const) {
    const url = urls[provider];
    if (!url) continue;
    if (env[name]) {
      settings.stderr.write(
        `runguard: ${name} was set; the command's ${provider} calls now go through runguard to the daemon's ${provider} ` +
          `upstream (to keep yours, start the daemon with ${upstream} set to it).\n`,
      );
    }
    env[name] = url;
  }
  // An agent's MCP config reads it: `"url": "${RUNGUARD_MCP_URL}/github"` (docs/mcp.md).
  if (urls.mcp) env.RUNGUARD_MCP_URL = urls.mcp;
  return env;
}

/**
 * What exec puts before the arguments of an agent whose base URL is no environment variable.
 * Codex reads `OPENAI_BASE_URL` for HTTPS only (its Responses WebSocket goes to OpenAI's host
 * regardless): its `openai_base_url` setting moves both. The user's own arguments follow, as
 * given: a `-c` of theirs later on the line wins, and is said to bypass the guard.
 */
function agentArgs(settings: ExecSettings, file: string, userArgs: string[], urls: Record<string, string>): string[] {
  const url = urls.openai;
  if (!url || !/^codex(\.js)?$/.test(basename(file))) return [];
  if (userArgs.some((arg) => /^openai_base_url\s*=/.test(arg) || /^--config=openai_base_url/.test(arg))) {
    settings.stderr.write(
      "runguard: codex was given its own openai_base_url, which wins over the run's: its calls there bypass runguard.\n",
    );
  }
  return ['-c', `openai_base_url=${JSON.stringify(url)}`];
}

/** A new span id in the trace of `given` (a W3C traceparent), else in a trace of its own. */
function runTraceparent(given: string | undefined): string {
  const hex = (bytes: number) => randomBytes(bytes).toString('hex');
  const parent = traceparentOf(given);
  if (parent) return `00-${parent.split('-')[1]}-${hex(8)}-${parent.split('-')[3]}`;
  return newTraceparent(hex);
}

/** Ends the run; false when that failed (said on stderr). */
async function endRun(settings: ExecSettings, runId: string, status: 'COMPLETED' | 'FAILED'): Promise<boolean> {
  try {
    const res = await call(settings, 'POST', `/v1/runs/${runId}/end`, { status });
    // 409: already ended (the idle sweeper, or an operator); nothing left to do.
    if (res.status !== 200 && res.status !== 409) throw failure(settings, 'ending the run', res);
    return true;
  } catch (error) {
    // The command's status still stands; the daemon's idle timeout will end the run.
    settings.stderr.write(`runguard: warning: ${(error as Error).message}\n`);
    return false;
  }
}
