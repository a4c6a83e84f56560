/**
 * The stdio wrap's guard, through the daemon's API: each `tools/call` a TOOL_CALL step created
 * before it is passed on (a denied one answered here, as the remote proxy answers it) and finished
 * when the server's response passes; each `tools/list` answer filtered by the workspace's policy.
 */
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
  type JsonRpcId,
  type JsonRpcMessage,
  type ToolCall,
} from './jsonrpc.js';
import { filteredToolList, listingPolicy } from './tool-list.js';
import { toolInput } from './tool-step.js';

/** The daemon's API as the wrap uses it (the CLI's client). */
export interface WrapApi {
  request<T>(method: string, path: string, body?: unknown): Promise<T>;
}

export interface WrapGuardOptions {
  /** The server's name, as registered tools are named (`<server>.<tool>`). */
  server: string;
  api: WrapApi;
  /** The run the calls join (exec's); null: each call is a run of its own, of `userId`. */
  runId: string | null;
  userId: string | null;
  /** Where a failure to record a call is told. */
  stderr: NodeJS.WritableStream;
}

interface PendingCall {
  stepId: string;
  runId: string;
  /** The call's run is its own: it ends with the call. */
  ownRun: boolean;
  started: number;
}

/** How many times a step's sequence is taken again after another step took it. */
const SEQUENCE_RETRIES = 10;

export class WrapGuard {
  /** Tool calls passed on, awaiting the server's response, by request id. */
  private readonly pending = new Map<string, PendingCall>();
  /** The agent's tools/list requests in flight, with the policy their answers are filtered by. */
  private readonly listings = new Map<string, ToolPolicyLists>();
  /** The next step sequence of each run, as this wrap last took it. */
  private readonly nextSequence = new Map<string, number>();

  constructor(private readonly options: WrapGuardOptions) {}

  /** An agent's message: null when it may go on to the server, else the answer the agent gets. */
  async check(message: JsonRpcMessage): Promise<JsonRpcMessage | null> {
    if (isRequest(message) && message.method === 'tools/list') return this.listingAsked(message.id);
    const call = toolCallOf(message);
    if (call) return this.decide(call);
    const cancelled = cancelledRequest(message);
    const known = cancelled === undefined ? undefined : this.pending.get(idKey(cancelled));
    if (known) {
      this.pending.delete(idKey(cancelled!));
      void this.finish(known, 'FAILED', { error: 'CANCELLED' });
    }
    return null;
  }

  /** A server's message, the answer to a tools/list filtered by the policy; null when it is none. */
  filteredListing(message: unknown): unknown {
    const response = responseOf(message);
    const policy = response && this.listings.get(idKey(response.id));
    if (!response || !policy) return null;
    this.listings.delete(idKey(response.id));
    return filteredToolList(message, policy, this.options.server);
  }

  /** A server's message passed to the agent: a response to a tool call finishes its step. */
  answered(message: unknown): void {
    const response = responseOf(message);
    if (!response) return;
    const call = this.pending.get(idKey(response.id));
    if (!call) return;
    this.pending.delete(idKey(response.id));
    const error = (message as { error?: unknown }).error;
    void this.finish(
      call,
      response.failed ? 'FAILED' : 'COMPLETED',
      error ? { jsonrpc_error: error } : response.failed ? { is_error: true } : {},
    );
  }

  /** The server exited: the calls it did not answer end FAILED. */
  async serverExited(): Promise<void> {
    for (const call of this.pending.values()) await this.finish(call, 'FAILED', { error: 'SERVER_EXITED' });
  }

  private async listingAsked(id: JsonRpcId): Promise<JsonRpcMessage | null> {
    try {
      const workspace = await this.options.api.request<{ tool_policy: ToolPolicyLists | null }>('GET', '/v1/workspace');
      const policy = listingPolicy(workspace.tool_policy);
      if (policy) this.listings.set(idKey(id), policy);
      return null;
    } catch (error) {
      // No policy, no listing: the agent is not offered tools the policy may refuse.
      return errorMessage(id, SERVER_ERROR, `runguard could not read the tool policy: ${(error as Error).message}`);
    }
  }

  /** A tool call decided through the API: null when it may go on, else the answer the agent gets. */
  private async decide(call: ToolCall): Promise<JsonRpcMessage | null> {
    const { api, server } = this.options;
    const step = { type: 'TOOL_CALL', tool_name: `${server}.${call.tool}`, input_data: toolInput(call.arguments) };
    try {
      let runId = this.options.runId;
      if (runId === null) {
        const run = await api.request<RunCreated>('POST', '/v1/runs', {
          user_id: this.options.userId,
          metadata: { mcp: server },
        });
        if (run.status === 'BLOCKED') return deniedResult(call.id, run.decision, null);
        runId = run.id;
      }
      const created = await this.createStep(runId, step);
      if (created.status === 'BLOCKED') {
        if (this.options.runId === null) await api.request('POST', `/v1/runs/${runId}/end`, { status: 'FAILED' });
        return deniedResult(call.id, created.decision, created.id);
      }
      this.pending.set(idKey(call.id), {
        stepId: created.id,
        runId,
        ownRun: this.options.runId === null,
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

  /**
   * The API takes a step's sequence from its client; in exec's run the proxy numbers the model
   * calls too, so the wrap takes the run's next number and, when another step took it meanwhile
   * (409), reads the run again and takes the one after.
   */
  private async createStep(runId: string, step: Record<string, unknown>): Promise<StepCreated> {
    const { api } = this.options;
    for (let attempt = 0; ; attempt++) {
      let sequence = this.nextSequence.get(runId);
      if (sequence === undefined || attempt > 0) {
        const run = await api.request<{ steps: { sequence: number }[] }>('GET', `/v1/runs/${runId}`);
        sequence = Math.max(0, ...run.steps.map((taken) => taken.sequence)) + 1;
      }
      try {
        const created = await api.request<StepCreated>('POST', `/v1/runs/${runId}/steps`, { ...step, sequence });
        this.nextSequence.set(runId, sequence + 1);
        return created;
      } catch (error) {
        if ((error as { code?: string }).code !== 'DUPLICATE_SEQUENCE' || attempt >= SEQUENCE_RETRIES) throw error;
      }
    }
  }

  private async finish(call: PendingCall, status: 'COMPLETED' | 'FAILED', output: Record<string, unknown>) {
    const { api } = this.options;
    try {
      await api.request('PATCH', `/v1/runs/${call.runId}/steps/${call.stepId}`, {
        status,
        duration_ms: Math.round(performance.now() - call.started),
        output_data: output,
      });
      if (call.ownRun) await api.request('POST', `/v1/runs/${call.runId}/end`, { status });
    } catch (error) {
      this.options.stderr.write(`runguard: recording a tool call failed: ${(error as Error).message}\n`);
    }
  }
}
