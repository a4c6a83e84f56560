/**
 * A denied tool call's answer: a JSON-RPC *result* with `isError`, so the MCP client hands it to
 * the model as the tool's output (a JSON-RPC error would read as a broken server, and be retried).
 * Its text says why in one sentence with the numbers; `_meta` carries the code and the detail
 * for programs.
 */
import { denialMessage } from '../proxy/denial-message.js';
import type { Decision } from '../contract/decision.js';
import type { JsonRpcId, JsonRpcMessage } from './jsonrpc.js';

export const DECISION_META_KEY = 'runguard/decision';

export function deniedResult(id: JsonRpcId, decision: Decision, stepId: string | null): JsonRpcMessage {
  return {
    jsonrpc: '2.0',
    id,
    result: {
      content: [{ type: 'text', text: denialMessage('tool call', decision) }],
      isError: true,
      _meta: {
        [DECISION_META_KEY]: { code: decision.reason, detail: decision.detail ?? null, step_id: stepId },
      },
    },
  };
}
