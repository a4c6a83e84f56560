/**
 * `runguard exec --user <id> -- <command...>`: runs an unmodified agent inside a guarded run. The
 * run is started first (a BLOCKED start never starts the command); the command gets provider base
 * URLs that proxy into that run by a run-scoped token; the run ends COMPLETED or FAILED by the
 * command's exit status, which becomes ours.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { constants } from 'node:os';
import { join, resolve } from 'node:path';

/** Exit status when the guard refused the run: the command was not started. */
export const EXIT_BLOCKED = 3;
/** Exit status when runguard itself failed (daemon unreachable, bad key, ...). */
export const EXIT_RUNGUARD_ERROR = 1;
/** The shell's status for a command that cannot be found or run. */
export const EXIT_NOT_RUNNABLE = 127;

const FORWARDED_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'];

export interface ExecSettings {
  /** Daemon base URL (RUNGUARD_URL). */
  url: string;
  /** API key (RUNGUARD_API_KEY, else `<data dir>/api-key`). */
  apiKey: string;
  userId: string;
  metadata: Record<string, string>;
  command: string[];
  env: NodeJS.ProcessEnv;
  stderr: NodeJS.WritableStream;
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

/** The API key the CLI uses: given, else the one the local daemon saved at its first start. */
export async function localApiKey(given: string | null, dataDir: string): Promise<string> {
  if (given) return given;
  const file = join(resolve(dataDir), 'api-key');
  try {
    const key = (await readFile(file, 'utf8')).trim();
    if (key) return key;
  } catch {
    /* reported below */
  }
  throw new ExecError(`no API key: set RUNGUARD_API_KEY, or run where the daemon's ${file} is readable`);
}

async function call<T>(settings: ExecSettings, method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> {
  const headers: Record<string, string> = { authorization: `Bearer ${settings.apiKey}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  // Run starts are idempotent by key, so a retry after a lost answer cannot start a second run.
  if (method === 'POST') headers['idempotency-key'] = randomUUID();
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const res = await fetch(settings.url + path, {
        method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }), signal: AbortSignal.timeout(10_000),
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
    await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
  }
  throw new ExecError(`cannot reach the runguard daemon at ${settings.url}: ${(lastError as Error)?.message ?? lastError}`);
}

function failure(what: string, res: { status: number; body: unknown }): ExecError {
  const b = res.body as { detail?: string; code?: string } | null;
  return new ExecError(`${what} failed (${res.status}${b?.code ? ` ${b.code}` : ''}): ${b?.detail ?? 'no detail'}`);
}

/** Runs the command in a guarded run; resolves to the exit status to leave with. */
export async function runExec(settings: ExecSettings): Promise<number> {
  const started = await call<{ id: string; status: string; decision: { reason: string | null } }>(
    settings, 'POST', '/v1/runs', { user_id: settings.userId, metadata: settings.metadata },
  );
  if (started.status !== 201) throw failure('starting the run', started);
  const run = started.body;
  if (run.status === 'BLOCKED') {
    settings.stderr.write(`runguard: run blocked (${run.decision.reason}); the command was not started.\n`);
    return EXIT_BLOCKED;
  }

  let minted: { status: number; body: { urls: Record<string, string> } };
  try {
    minted = await call(settings, 'POST', `/v1/runs/${run.id}/proxy-token`);
    if (minted.status !== 201) throw failure('minting the proxy token', minted);
  } catch (error) {
    await endRun(settings, run.id, 'FAILED');
    throw error;
  }
  const urls = minted.body.urls;
  const env: NodeJS.ProcessEnv = { ...settings.env, RUNGUARD_RUN_ID: run.id };
  if (urls.openai) env.OPENAI_BASE_URL = urls.openai;
  if (urls.anthropic) env.ANTHROPIC_BASE_URL = urls.anthropic;

  const [file, ...args] = settings.command;
  const outcome = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; spawnError?: Error }>((done) => {
    const child = spawn(file!, args, { stdio: 'inherit', env });
    const forward = (signal: NodeJS.Signals) => {
      child.kill(signal);
    };
    for (const signal of FORWARDED_SIGNALS) process.on(signal, forward);
    const cleanup = () => {
      for (const signal of FORWARDED_SIGNALS) process.off(signal, forward);
    };
    child.once('error', (spawnError) => {
      cleanup();
      done({ code: null, signal: null, spawnError });
    });
    child.once('exit', (code, signal) => {
      cleanup();
      done({ code, signal });
    });
  });

  let status: number;
  if (outcome.spawnError) {
    settings.stderr.write(`runguard: cannot run ${file}: ${outcome.spawnError.message}\n`);
    status = EXIT_NOT_RUNNABLE;
  } else if (outcome.signal) {
    status = 128 + (constants.signals[outcome.signal] ?? 0);
  } else {
    status = outcome.code ?? EXIT_RUNGUARD_ERROR;
  }
  await endRun(settings, run.id, status === 0 ? 'COMPLETED' : 'FAILED');
  return status;
}

async function endRun(settings: ExecSettings, runId: string, status: 'COMPLETED' | 'FAILED'): Promise<void> {
  try {
    const res = await call(settings, 'POST', `/v1/runs/${runId}/end`, { status });
    // 409: already ended (the idle sweeper, or an operator); nothing left to do.
    if (res.status !== 200 && res.status !== 409) throw failure('ending the run', res);
  } catch (error) {
    // The command's status still stands; the daemon's idle timeout will end the run.
    settings.stderr.write(`runguard: warning: ${(error as Error).message}\n`);
  }
}
