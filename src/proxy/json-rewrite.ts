/**
 * The bytes of a rewritten JSON body, spliced into the client's own where that is enough.
 * Re-serialising the whole body cost the daemon's thread ~12 ms for a 4 MB chat request (images
 * as data URLs), more than parsing it; asking for a stream's usage only adds a member.
 */
import { asObject } from './json-fields.js';

const OPEN_BRACE = 0x7b;
/** JSON's insignificant whitespace (RFC 8259): space, tab, LF, CR. */
const WHITESPACE = new Set([0x20, 0x09, 0x0a, 0x0d]);

/**
 * `rewritten` as bytes to send. When it keeps every member of `parsed` (the client's body as
 * parsed from `raw`) by identity and only adds members, those are written into `raw` right after
 * its opening brace, and the client's bytes are otherwise sent as they are (duplicate keys
 * included, as for a body not rewritten). Any other rewrite is serialised whole.
 */
export function rewrittenBytes(raw: Buffer, parsed: unknown, rewritten: unknown): Buffer {
  const spliced = splice(raw, asObject(parsed), asObject(rewritten));
  return spliced ?? Buffer.from(JSON.stringify(rewritten));
}

function splice(
  raw: Buffer,
  parsed: Record<string, unknown> | undefined,
  rewritten: Record<string, unknown> | undefined,
): Buffer | null {
  if (!parsed || !rewritten) return null;
  const kept = Object.keys(parsed);
  if (!kept.every((key) => Object.hasOwn(rewritten, key) && rewritten[key] === parsed[key])) return null;
  // Members JSON.stringify would drop (undefined, functions) are dropped here too.
  const added = Object.keys(rewritten)
    .filter((key) => !Object.hasOwn(parsed, key))
    .map((key) => [key, JSON.stringify(rewritten[key]) as string | undefined] as const)
    .filter(([, value]) => value !== undefined);
  let at = 0;
  while (at < raw.length && WHITESPACE.has(raw[at]!)) at++;
  if (raw[at] !== OPEN_BRACE) return null; // not the text `parsed` came from
  if (added.length === 0) return raw;
  const members = added.map(([key, value]) => `${JSON.stringify(key)}:${value}`).join(',');
  return Buffer.concat([
    raw.subarray(0, at + 1),
    Buffer.from(kept.length > 0 ? `${members},` : members),
    raw.subarray(at + 1),
  ]);
}
