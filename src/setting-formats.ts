/**
 * What the settings src/settings.ts declares accept: the formats beyond JSON Schema's they use, and
 * what each setting accepts in words, for validation's messages and docs/configuration.md alike.
 * Plain code without TypeBox: the loader (src/config.ts) reads the declaration as JSON and needs
 * only this, so a CLI command that looks for the daemon does not load the schema builder.
 *
 * Each schema carries, besides JSON Schema's own keywords:
 * - `env`: the environment variable that sets it;
 * - `secret`: its value may hold a password or a key, so an error never echoes it;
 * - `accepts`: what a valid value is, in words, when it cannot be said from the schema.
 */

/** Formats beyond JSON Schema's: what each accepts, in words, and its check. */
export const FORMATS = {
  'postgres-url': {
    type: 'string',
    accepts: 'a postgres: or postgresql: URL',
    validate: (value: string) => urlWith(value, ['postgres:', 'postgresql:']) !== null,
  },
  'redis-url': {
    type: 'string',
    accepts: 'a redis: or rediss: URL',
    validate: (value: string) => urlWith(value, ['redis:', 'rediss:']) !== null,
  },
  'http-base-url': {
    type: 'string',
    accepts: 'a base URL (http or https) without query, fragment or credentials',
    validate: (value: string) => {
      const url = urlWith(value, ['http:', 'https:']);
      return url !== null && !url.search && !url.hash && !url.username && !url.password;
    },
  },
  'web-origin': {
    type: 'string',
    accepts: 'an origin: scheme, host and port only (e.g. https://tools.example.com)',
    validate: (value: string) => {
      const url = urlWith(value, ['http:', 'https:']);
      return url !== null && url.origin === value.replace(/\/$/, '');
    },
  },
  'power-of-two': {
    type: 'number',
    accepts: 'a power of two',
    validate: (value: number) => Number.isInteger(value) && value > 0 && (value & (value - 1)) === 0,
  },
} as const;
export type FormatName = keyof typeof FORMATS;

function urlWith(value: string, protocols: readonly string[]): URL | null {
  try {
    const url = new URL(value);
    return protocols.includes(url.protocol) ? url : null;
  } catch {
    return null;
  }
}

/** The annotations every setting carries, read from its schema. */
export interface SettingSchema {
  env: string;
  default: unknown;
  description: string;
  secret?: boolean;
  accepts?: string;
  [keyword: string]: unknown;
}

/** What a valid value of `schema` is, in words ("an integer from 0 to 65535"). */
export function acceptsText(schema: Record<string, unknown>): string {
  if (typeof schema.accepts === 'string') return schema.accepts;
  const branches = schema.anyOf as Record<string, unknown>[] | undefined;
  if (branches) {
    const values = branches.filter((branch) => branch.type !== 'null');
    return values.length === 1 ? acceptsText(values[0]!) : values.map(acceptsText).join(', or ');
  }
  if (Array.isArray(schema.enum)) return `one of ${schema.enum.join(', ')}`;
  const format = typeof schema.format === 'string' ? FORMATS[schema.format as FormatName]?.accepts : undefined;
  const range = (min: unknown, max: unknown) =>
    typeof min === 'number' && typeof max === 'number' ? ` from ${min} to ${max}` : '';
  switch (schema.type) {
    case 'boolean':
      return 'true or false';
    case 'integer':
      return `${format ?? 'an integer'}${range(schema.minimum, schema.maximum)}`;
    case 'string':
      if (format) return format;
      if (typeof schema.minLength === 'number' && schema.minLength > 1)
        return `at least ${schema.minLength} characters`;
      return 'a non-empty string';
    default:
      return JSON.stringify(schema.type);
  }
}
