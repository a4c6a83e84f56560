/**
 * A run's tags: their bounds, which the API's `RunTags` schema declares with, and tags written as
 * `key=value` pairs: the proxy's `x-runguard-tags: project=search,team=growth` header and
 * `runguard exec --tag project=search`. No imports, so the CLI reads tags without the schemas.
 */

/** At most this many tags on a run. */
export const MAX_RUN_TAGS = 16;
/**
 * A tag's key: 1 to 64 of `a-z 0-9 _ . -`. No `:` or `=`, so `key:value` (a filter, a budget's
 * subject) and `key=value` (the proxy's header, the CLI) split at their first one.
 */
export const TAG_KEY_PATTERN = '^[a-z0-9_.-]{1,64}$';
/** A tag's value: 1 to 128 characters (its length apart, so that a 422 says which), no control character. */
export const TAG_VALUE_PATTERN = '^[^\\u0000-\\u001F\\u007F-\\u009F]*$';
export const TAG_VALUE_MAX_LENGTH = 128;

const TAG_KEY = new RegExp(TAG_KEY_PATTERN);
const TAG_VALUE = new RegExp(TAG_VALUE_PATTERN, 'u');

/** Tags read, or why they could not be: a sentence naming the pair at fault. */
export type TagPairs = { tags: Record<string, string> } | { problem: string };

/**
 * `key=value` pairs as tags: split at the first `=` (a key has none), each side trimmed of
 * spaces. With `percentDecoded`, a value's `%XX` escapes are decoded (the header's way of carrying
 * a comma: `%2C`). A key given twice, a pair without `=`, or a bound crossed is a problem.
 */
export function tagsFromPairs(pairs: readonly string[], percentDecoded = false): TagPairs {
  const tags: Record<string, string> = {};
  if (pairs.length > MAX_RUN_TAGS) return { problem: `at most ${MAX_RUN_TAGS} tags, not ${pairs.length}` };
  for (const pair of pairs) {
    const equals = pair.indexOf('=');
    if (equals === -1) return { problem: `"${pair}" is not key=value` };
    const key = pair.slice(0, equals).trim();
    let value = pair.slice(equals + 1).trim();
    if (!TAG_KEY.test(key)) return { problem: `"${key}" is not a tag key: 1 to 64 characters of a-z, 0-9, _, . and -` };
    if (Object.hasOwn(tags, key)) return { problem: `the tag "${key}" is given twice` };
    if (percentDecoded) {
      try {
        value = decodeURIComponent(value);
      } catch {
        return { problem: `the value of "${key}" has a malformed %-escape` };
      }
    }
    const length = [...value].length;
    if (length < 1 || length > TAG_VALUE_MAX_LENGTH || !TAG_VALUE.test(value) || !value.isWellFormed())
      return {
        problem: `the value of "${key}" must be 1 to ${TAG_VALUE_MAX_LENGTH} characters, no control characters`,
      };
    tags[key] = value;
  }
  return { tags };
}

/** The `x-runguard-tags` header's pairs: comma-separated (a header sent twice arrives joined by commas). */
export const tagsFromHeader = (header: string): TagPairs =>
  tagsFromPairs(
    header.split(',').filter((pair) => pair.trim() !== ''),
    true,
  );
