/**
 * Patterns over tool names (`{server}.{tool}`): `*` stands for any run of characters, every other
 * character for itself. Pure, for the rule engine (tool_allowed) and the tool prices alike.
 */

/** Whether `tool` matches `pattern` as a whole. */
export function toolMatches(pattern: string, tool: string): boolean {
  const parts = pattern.split('*');
  if (parts.length === 1) return pattern === tool;
  const first = parts[0]!;
  const last = parts[parts.length - 1]!;
  if (tool.length < first.length + last.length || !tool.startsWith(first) || !tool.endsWith(last)) return false;
  // The middle parts in order, each as early as it fits: a greedy scan is exact for `*` alone.
  let at = first.length;
  const end = tool.length - last.length;
  for (const part of parts.slice(1, -1)) {
    const found = tool.indexOf(part, at);
    if (found === -1 || found + part.length > end) return false;
    at = found + part.length;
  }
  return true;
}

/**
 * Of the patterns `tool` matches, the most specific: an exact name first, then the one with the
 * most literal characters, then the one with fewer `*`, then the first in text order. Null: none.
 */
export function mostSpecific(patterns: Iterable<string>, tool: string): string | null {
  let best: string | null = null;
  for (const pattern of patterns) {
    if (!toolMatches(pattern, tool)) continue;
    if (best === null || moreSpecific(pattern, best)) best = pattern;
  }
  return best;
}

function moreSpecific(pattern: string, than: string): boolean {
  const literals = pattern.replaceAll('*', '').length;
  const otherLiterals = than.replaceAll('*', '').length;
  if (literals !== otherLiterals) return literals > otherLiterals;
  const stars = pattern.length - literals;
  const otherStars = than.length - otherLiterals;
  if (stars !== otherStars) return stars < otherStars;
  return pattern < than;
}

/** Which tools may be called: deny patterns, and an allow list (null: every tool not denied). */
export interface ToolPolicyLists {
  allow: readonly string[] | null;
  deny: readonly string[] | null;
}

/** Why `tool` is not allowed: the deny pattern it matches, or null for "not in the allow list"; undefined: allowed. */
export function toolRefusal(policy: ToolPolicyLists, tool: string): { pattern: string | null } | undefined {
  const denied = policy.deny?.find((pattern) => toolMatches(pattern, tool));
  if (denied !== undefined) return { pattern: denied };
  if (policy.allow !== null && !policy.allow.some((pattern) => toolMatches(pattern, tool))) return { pattern: null };
  return undefined;
}
