/**
 * `runguard mcp wrap --server NAME -- <command> [args...]`: a local (stdio) MCP server behind the
 * guard. The agent's MCP config launches this instead of the server; it spawns the server and
 * relays newline-delimited JSON-RPC both ways. Each `tools/call` is a TOOL_CALL step created
 * through the daemon's API before it is passed on (a denied one is answered here, as the remote
 * proxy answers it), and finished when the server's response passes. Everything else passes as
 * it is; the server's stderr is the wrap's; the wrap exits with the server, and the server is
 * stopped with the wrap.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { RunCreated, StepCreated } from '../contract/index.js';
import type { ToolPolicyLists } from '../rules/tool-patterns.js';
import { deniedResult } from './denied-result.js';
import {
  cancelledRequest,
  errorMessage,
  idKey,
  isRequest,
  responseOf,
  SERVER_ERROR,
  toolCallOf,
  type JsonRpcMessage,
} from './jsonrpc.js';
import { filteredToolList, listingPolicy } from './tool-list.js';
import { toolInput } from './tool-step.js';

/** The daemon's API as the wrap uses it (the CLI's client). */
export interface WrapApi {
  request<T>(method: string, path: string, body?: unknown): Promise<T>;
}

export interface WrapOptions {
  server: string;
  command: string;
  args: string[];
  api: WrapApi;
  /** The run the calls join (exec's); null: each call is a run of its own, of `userId`. */
  runId: string | null;
  userId: string | null;
  stdin: NodeJS.ReadableStream;
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
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

interface PendingCall {
  stepId: string;
  runId: string;
  /** The call's run is its own: it ends with the call. */
  ownRun: boolean;
  started: number;
}

/** Runs the wrap until the server exits; resolves with its exit code. */
// eslint-disable-next-line max-lines-per-function -- split with issue #50
export async function runWrap(options: WrapOptions): Promise<number> {
  const { api, server, stdout } = options;
  const child = spawn(options.command, options.args, {
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
  // The server dies with the wrap.
  const stop = () => child.kill('SIGTERM');
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  process.once('exit', stop);

  const pending = new Map<string, PendingCall>();
  const send = (message: JsonRpcMessage) => stdout.write(`${JSON.stringify(message)}\n`);

  const finish = async (call: PendingCall, status: 'COMPLETED' | 'FAILED', output: Record<string, unknown>) => {
    try {
      await api.request('PATCH', `/v1/runs/${call.runId}/steps/${call.stepId}`, {
        status,
        duration_ms: Math.round(performance.now() - call.started),
        output_data: output,
      });
      if (call.ownRun) await api.request('POST', `/v1/runs/${call.runId}/end`, { status });
    } catch (error) {
      options.stderr.write(`runguard: recording a tool call failed: ${(error as Error).message}\n`);
    }
  };

  /** The agent's tools/list requests in flight, with the policy their answers are filtered by. */
  const listings = new Map<string, ToolPolicyLists>();

  // The server's messages to the agent, as they come: a response to a tool call finishes its step,
  // a tools/list answer loses the tools the policy refuses.
  createInterface({ input: child.stdout }).on('line', (line) => {
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
      const response = responseOf(message);
      const policy = response && listings.get(idKey(response.id));
      if (!response || !policy) return message;
      listings.delete(idKey(response.id));
      filtered = true;
      return filteredToolList(message, policy, server);
    });
    stdout.write(filtered ? `${JSON.stringify(batch ? relayed : relayed[0])}\n` : `${line}\n`);
    for (const message of relayed) {
      const response = responseOf(message);
      if (!response) continue;
      const call = pending.get(idKey(response.id));
      if (!call) continue;
      pending.delete(idKey(response.id));
      const error = (message as { error?: unknown }).error;
      void finish(
        call,
        response.failed ? 'FAILED' : 'COMPLETED',
        error ? { jsonrpc_error: error } : response.failed ? { is_error: true } : {},
      );
    }
  });

  /**
   * The API takes a step's sequence from its client; in exec's run the proxy numbers the model
   * calls too, so the wrap takes the run's next number and, when another step took it meanwhile
   * (409), reads the run again and takes the one after.
   */
  const nextSequence = new Map<string, number>();
  async function createStep(runId: string, step: Record<string, unknown>): Promise<StepCreated> {
    for (let attempt = 0; ; attempt++) {
      let sequence = nextSequence.get(runId);
      if (sequence === undefined || attempt > 0) {
        const run = await api.request<{ steps: { sequence: number }[] }>('GET', `/v1/runs/${runId}`);
        sequence = Math.max(0, ...run.steps.map((taken) => taken.sequence)) + 1;
      }
      try {
        const created = await api.request<StepCreated>('POST', `/v1/runs/${runId}/steps`, { ...step, sequence });
        nextSequence.set(runId, sequence + 1);
        return created;
      } catch (error) {
        if ((error as { code?: string }).code !== 'DUPLICATE_SEQUENCE' || attempt >= 10) throw error;
      }
    }
  }

  /** A tool call decided through the API: null when it may go on, else the answer the agent gets. */
  async function guard(message: JsonRpcMessage): Promise<JsonRpcMessage | null> {
    if (isRequest(message) && message.method === 'tools/list') {
      try {
        const workspace = await api.request<{ tool_policy: ToolPolicyLists | null }>('GET', '/v1/workspace');
        const policy = listingPolicy(workspace.tool_policy);
        if (policy) listings.set(idKey(message.id), policy);
        return null;
      } catch (error) {
        // No policy, no listing: the agent is not offered tools the policy may refuse.
        return errorMessage(
          message.id,
          SERVER_ERROR,
          `runguard could not read the tool policy: ${(error as Error).message}`,
        );
      }
    }
    const call = toolCallOf(message);
    if (!call) {
      const cancelled = cancelledRequest(message);
      const known = cancelled === undefined ? undefined : pending.get(idKey(cancelled));
      if (known) {
        pending.delete(idKey(cancelled!));
        void finish(known, 'FAILED', { error: 'CANCELLED' });
      }
      return null;
    }
    const step = {
      type: 'TOOL_CALL',
      tool_name: `${server}.${call.tool}`,
      input_data: toolInput(call.arguments),
    };
    try {
      let runId = options.runId;
      if (runId === null) {
        const run = await api.request<RunCreated>('POST', '/v1/runs', {
          user_id: options.userId,
          metadata: { mcp: server },
        });
        if (run.status === 'BLOCKED') return deniedResult(call.id, run.decision, null);
        runId = run.id;
      }
      const created = await createStep(runId, step);
      if (created.status === 'BLOCKED') {
        if (options.runId === null) await api.request('POST', `/v1/runs/${runId}/end`, { status: 'FAILED' });
        return deniedResult(call.id, created.decision, created.id);
      }
      pending.set(idKey(call.id), {
        stepId: created.id,
        runId,
        ownRun: options.runId === null,
        started: performance.now(),
      });
      return null;
    } catch (error) {
      // No check, no call: the tool is not run unguarded.
      return errorMessage(
        call.id,
        SERVER_ERROR,
        `runguard could not check this tool call: ${(error as Error).message}`,
      );
    }
  }

  // The agent's messages, in order: each tool call is decided before the next message goes on.
  const agentDone = (async () => {
    for await (const line of createInterface({ input: options.stdin })) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        child.stdin.write(`${line}\n`);
        continue;
      }
      const messages = (Array.isArray(parsed) ? parsed : [parsed]) as JsonRpcMessage[];
      const passed: JsonRpcMessage[] = [];
      for (const message of messages) {
        const answer = await guard(message);
        if (answer) send(answer);
        else passed.push(message);
      }
      if (passed.length === 0) continue;
      child.stdin.write(Array.isArray(parsed) ? `${JSON.stringify(passed)}\n` : `${line}\n`);
    }
    // The agent closed its side: so does the server's.
    child.stdin.end();
  })();
  agentDone.catch(() => child.stdin.end());

  const code = await exited;
  for (const call of pending.values()) await finish(call, 'FAILED', { error: 'SERVER_EXITED' });
  process.removeListener('SIGTERM', stop);
  process.removeListener('SIGINT', stop);
  process.removeListener('exit', stop);
  return code;
}
