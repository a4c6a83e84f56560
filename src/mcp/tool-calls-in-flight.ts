/**
 * The tool calls forwarded to MCP servers and not yet answered, by session and request id. Each
 * call's step result is recorded once: when its response passes, when the exchange ends without
 * one, or when the client cancels it. The tool-call metrics are counted here, denials included.
 */
import type { Metrics } from '../metrics.js';
import type { CallStatus, RecordResult } from '../proxy/call-result.js';
import { NO_TOKENS } from '../proxy/providers/index.js';
import { idKey, type JsonRpcId, type ToolCall } from './jsonrpc.js';

type Finish = (status: CallStatus, outcome: Record<string, unknown>, notReached?: boolean) => void;

/** A forwarded tool call; `finish` records its result the first time, and does nothing after. */
export interface TrackedCall {
  readonly id: JsonRpcId;
  readonly finish: Finish;
}

/** The metrics' label of a server's tool. */
const toolLabel = (server: string, call: ToolCall) => `${server}.${call.tool}`.slice(0, 200);

export class ToolCallsInFlight {
  private readonly pending = new Map<string, Finish>();

  constructor(private readonly metrics: Metrics | null) {}

  track(session: string, server: string, call: ToolCall, record: RecordResult): TrackedCall {
    const started = performance.now();
    const pendingKey = `${session}\u0000${idKey(call.id)}`;
    let done = false;
    const finish: Finish = (status, outcome, notReached = false) => {
      if (done) return;
      done = true;
      this.pending.delete(pendingKey);
      record(status, NO_TOKENS, outcome, null, notReached);
      const label = status === 'COMPLETED' ? 'completed' : 'failed';
      this.metrics?.toolCalls.inc({ server, tool: toolLabel(server, call), outcome: label });
      this.metrics?.toolCallSeconds.observe({ server, outcome: label }, (performance.now() - started) / 1000);
    };
    this.pending.set(pendingKey, finish);
    return { id: call.id, finish };
  }

  /** The client cancelled a request of the session: a tool call in flight ends FAILED now. */
  cancel(session: string, id: JsonRpcId): void {
    this.pending.get(`${session}\u0000${idKey(id)}`)?.('FAILED', { error: 'CANCELLED' });
  }

  /** A tool call denied: answered by the sidecar, never forwarded. */
  denied(server: string, call: ToolCall): void {
    this.metrics?.toolCalls.inc({ server, tool: toolLabel(server, call), outcome: 'denied' });
  }
}
