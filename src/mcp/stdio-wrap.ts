/**
 * `runguard mcp wrap --server NAME -- <command> [args...]`: a local (stdio) MCP server behind the
 * guard. The agent's MCP config launches this instead of the server; it spawns the server and
 * relays newline-delimited JSON-RPC both ways. Each `tools/call` is a TOOL_CALL step created
 * through the daemon's API before it is passed on (a denied one is answered here, as the remote
 * proxy answers it), and finished when the server's response passes. Everything else passes as
 * it is; the server's stderr is the wrap's; the wrap exits with the server, and the server is
 * stopped with the wrap.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import type { JsonRpcMessage } from './jsonrpc.js';
import { WrapGuard, type WrapGuardOptions } from './wrap-guard.js';

export interface WrapOptions extends WrapGuardOptions {
  command: string;
  args: string[];
  stdin: NodeJS.ReadableStream;
  stdout: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
}

/** How many parent processes are looked through for `runguard exec`'s run. */
const ANCESTORS_SEARCHED = 32;

/**
 * The `RUNGUARD_*` variables of the nearest ancestor process that has a `RUNGUARD_RUN_ID` (the
 * command `runguard exec` started, or anything it started with its environment), read from
 * /proc/<pid>/environ: what the kernel recorded when that process started, so it holds even when
 * an MCP client launched the wrap with a stripped environment, cannot go stale, and needs no file
 * that a killed exec would leave behind. Linux only; elsewhere, and when none is found: {}.
 */
export function execAncestorEnv(startPid: number = process.ppid): Record<string, string> {
  let pid = startPid;
  for (let depth = 0; depth < ANCESTORS_SEARCHED && pid > 1; depth++) {
    try {
      const entries = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      const vars: Record<string, string> = {};
      for (const entry of entries) {
        const at = entry.indexOf('=');
        if (at > 0 && entry.startsWith('RUNGUARD_')) vars[entry.slice(0, at)] = entry.slice(at + 1);
      }
      if (vars.RUNGUARD_RUN_ID) return vars;
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      pid = Number(/^PPid:\s+(\d+)/m.exec(status)?.[1] ?? 0);
    } catch {
      return {};
    }
  }
  return {};
}

/** Runs the wrap until the server exits; resolves with its exit code. */
export async function runWrap(options: WrapOptions): Promise<number> {
  const server = startServer(options);
  const guard = new WrapGuard(options);
  // The server's messages to the agent, as they come.
  createInterface({ input: server.child.stdout }).on('line', (line) => relayServerLine(line, guard, options.stdout));
  const agentDone = relayAgentLines(options, server.child.stdin, guard);
  agentDone.catch(() => server.child.stdin.end());
  const code = await server.exited;
  await guard.serverExited();
  server.release();
  return code;
}

/** The server, its stdin and stdout the wrap's to relay, its stderr the wrap's own; it dies with the wrap. */
function startServer(options: WrapOptions) {
  const child: ChildProcessByStdio<Writable, Readable, null> = spawn(options.command, options.args, {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: options.env,
  });
  const exited = new Promise<number>((resolve) => {
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
    child.once('error', (error) => {
      options.stderr.write(`runguard: could not start the MCP server: ${error.message}\n`);
      resolve(127);
    });
  });
  const stop = () => child.kill('SIGTERM');
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  process.once('exit', stop);
  return {
    child,
    /** Resolves with the server's exit code (127: it could not start). */
    exited,
    /** The server has exited: the wrap's signals no longer stop it. */
    release() {
      process.removeListener('SIGTERM', stop);
      process.removeListener('SIGINT', stop);
      process.removeListener('exit', stop);
    },
  };
}

/** A line from the server to the agent: passed as it is, but for a tools/list answer the policy filters; a tool call's response finishes its step. */
function relayServerLine(line: string, guard: WrapGuard, stdout: NodeJS.WritableStream): void {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    stdout.write(`${line}\n`);
    return;
  }
  const batch = Array.isArray(parsed);
  let filtered = false;
  const relayed = (batch ? (parsed as unknown[]) : [parsed]).map((message) => {
    const listing = guard.filteredListing(message);
    if (listing === null) return message;
    filtered = true;
    return listing;
  });
  stdout.write(filtered ? `${JSON.stringify(batch ? relayed : relayed[0])}\n` : `${line}\n`);
  for (const message of relayed) guard.answered(message);
}

/** The agent's messages, in order: each tool call is decided before the next message goes on. */
async function relayAgentLines(options: WrapOptions, toServer: Writable, guard: WrapGuard): Promise<void> {
  const send = (message: JsonRpcMessage) => options.stdout.write(`${JSON.stringify(message)}\n`);
  for await (const line of createInterface({ input: options.stdin })) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      toServer.write(`${line}\n`);
      continue;
    }
    const messages = (Array.isArray(parsed) ? parsed : [parsed]) as JsonRpcMessage[];
    const passed: JsonRpcMessage[] = [];
    for (const message of messages) {
      const answer = await guard.check(message);
      if (answer) send(answer);
      else passed.push(message);
    }
    if (passed.length === 0) continue;
    toServer.write(Array.isArray(parsed) ? `${JSON.stringify(passed)}\n` : `${line}\n`);
  }
  // The agent closed its side: so does the server's.
  toServer.end();
}
