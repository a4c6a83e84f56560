import { GuardConfigError } from './errors.js';
import { isApiKeyFormat } from './shared/api-key-format.js';

export { isApiKeyFormat };

/**
 * Throws {@link GuardConfigError} when `value` is not a well-formed API key.
 * The message says which part is wrong, and where the key came from (`source`: the option or the
 * environment variable), but never echoes the key: it ends up in logs.
 */
export function assertApiKey(value: unknown, source = 'apiKey'): asserts value is string {
  if (isApiKeyFormat(value)) return;
  if (value === undefined || value === null || value === '') {
    throw new GuardConfigError(
      'Invalid runguard API key: no apiKey was given and RUNGUARD_API_KEY is not set. A local daemon writes its key ' +
        'to .runguard/api-key in the folder it was started from: export RUNGUARD_API_KEY="$(cat .runguard/api-key)".',
    );
  }
  throw new GuardConfigError(
    `Invalid runguard API key (from ${source}): ${describeProblem(value)} Expected lg_<prefix>_<secret>.`,
  );
}

function describeProblem(value: unknown): string {
  if (typeof value !== 'string') return `apiKey must be a string, got ${typeof value}.`;
  if (/\s/.test(value)) return 'the key contains whitespace (a trailing newline from a file or env var?).';
  if (!value.startsWith('lg_')) return 'the key must start with "lg_".';
  const prefix = value.slice(3, 15);
  if (!/^[a-z0-9]{12}$/.test(prefix) || value[15] !== '_') {
    return 'the prefix must be exactly 12 lowercase letters or digits, followed by "_".';
  }
  return 'the secret must be at least 32 characters from A-Z, a-z, 0-9, "_" and "-".';
}
