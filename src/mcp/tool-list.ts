/**
 * A `tools/list` answer as the workspace's tool policy lets the agent see it: the tools the policy
 * refuses are left out, so a model is not offered what rule 12 would deny. Used by the remote proxy
 * and the stdio wrap alike.
 */
import { toolRefusal, type ToolPolicyLists } from '../rules/tool-patterns.js';

/** The policy when it has lists; null when it filters nothing. */
export function listingPolicy<P extends ToolPolicyLists>(policy: P | null | undefined): P | null {
  return policy && (policy.allow !== null || policy.deny !== null) ? policy : null;
}

/** The message with its `result.tools` filtered, when it has that list; else the message as it is. */
export function filteredToolList(message: unknown, policy: ToolPolicyLists, server: string): unknown {
  const result = (message as { result?: { tools?: unknown } } | null)?.result;
  if (!result || !Array.isArray(result.tools)) return message;
  const kept = result.tools.filter(
    (tool: { name?: unknown }) =>
      toolRefusal(policy, `${server}.${typeof tool?.name === 'string' ? tool.name : ''}`) === undefined,
  );
  return { ...(message as object), result: { ...result, tools: kept } };
}
