/**
 * The shape of a workspace API key, `lg_<prefix>_<secret>`: once, for the CLI and the SDK, which
 * check a key before they send it. No imports: the SDK package carries a copy of this file.
 */
export const API_KEY_PATTERN = /^lg_[a-z0-9]{12}_[A-Za-z0-9_-]{32,}$/;

/** True when `value` has the shape `lg_<12 lowercase alphanumerics>_<32+ URL-safe characters>`. */
export function isApiKeyFormat(value: unknown): value is string {
  return typeof value === 'string' && API_KEY_PATTERN.test(value);
}
