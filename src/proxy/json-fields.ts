/** Narrow readers for untrusted JSON: provider bodies are never trusted to match their docs. */

export type JsonObject = Record<string, unknown>;

export function asObject(value: unknown): JsonObject | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as JsonObject) : undefined;
}

/** A model's name as a body gives it: a non-empty string of at most 256 characters, else null. */
export function modelNamed(value: unknown): string | null {
  return typeof value === 'string' && value.length > 0 ? value.slice(0, 256) : null;
}

/**
 * How deep a request body may nest. Its canonical form (the loop rule's hash) and its
 * re-serialisation recurse once per level; a body ~2,400 levels deep overflowed the stack.
 * Nothing a provider accepts comes close.
 */
export const MAX_BODY_DEPTH = 128;

/** Whether parsed JSON nests deeper than `max` levels of arrays and objects; walked without recursion. */
export function nestsDeeperThan(value: unknown, max: number): boolean {
  // Two parallel stacks of containers only: every proxied call's body passes here, and an object
  // and an array of values per node were most of what the walk cost.
  const containers: object[] = [];
  const depths: number[] = [];
  if (value !== null && typeof value === 'object') {
    containers.push(value);
    depths.push(0);
  }
  while (containers.length > 0) {
    const container = containers.pop()!;
    const depth = depths.pop()!;
    if (depth >= max) return true;
    if (Array.isArray(container)) {
      for (const child of container as unknown[]) {
        if (child !== null && typeof child === 'object') {
          containers.push(child);
          depths.push(depth + 1);
        }
      }
    } else {
      for (const key in container) {
        if (!Object.hasOwn(container, key)) continue;
        const child = (container as Record<string, unknown>)[key];
        if (child !== null && typeof child === 'object') {
          containers.push(child);
          depths.push(depth + 1);
        }
      }
    }
  }
  return false;
}

/** Parses JSON, `undefined` when it is not JSON. */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * Whether a JSON text may hold a `"usage"` key whose value is an object: the test that lets a
 * stream's reader skip parsing its many events. OpenAI streams with `include_usage` (which the
 * proxy asks for) put `"usage":null` in every delta and the object only in the last. A quote
 * inside a JSON string is escaped, so text the model wrote cannot pass for the key.
 */
export function mayHoldUsage(text: string): boolean {
  return USAGE_OBJECT.test(text);
}

const USAGE_OBJECT = /"usage"\s*:\s*\{/;

/** The request path without its query string or trailing slash, for matching endpoints by suffix. */
export function endpointPath(path: string): string {
  const end = path.search(/[?#]/);
  let bare = end === -1 ? path : path.slice(0, end);
  if (bare.endsWith('/')) bare = bare.slice(0, -1);
  return bare.startsWith('/') ? bare : `/${bare}`;
}

/**
 * `path` with `/v1` before it when its first segment is one of `resources` (an API's top-level
 * names): `/messages` becomes `/v1/messages`; `/v1/messages` and `/api/hello` stay as they are.
 */
export function withVersionPrefix(path: string, resources: ReadonlySet<string>): string {
  const first = /^\/([^/?#]+)/.exec(path)?.[1];
  return first !== undefined && resources.has(first) ? `/v1${path}` : path;
}
