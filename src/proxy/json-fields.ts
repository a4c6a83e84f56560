/** Narrow readers for untrusted JSON: provider bodies are never trusted to match their docs. */

export type JsonObject = Record<string, unknown>;

export function asObject(value: unknown): JsonObject | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as JsonObject) : undefined;
}

/**
 * The largest token count believed: the API's own bound on a step's counts (`Count` in
 * api/schemas.ts). Beyond it a provider's number is garbage, not usage.
 */
export const MAX_TOKEN_COUNT = 1_000_000_000_000;

/** A token count: a non-negative integer up to MAX_TOKEN_COUNT, else `null` (not reported). */
export function tokenCount(value: unknown): number | null {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && value <= MAX_TOKEN_COUNT
    ? value
    : null;
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
