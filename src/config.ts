/**
 * Configuration: each setting's default (declared in src/settings.ts), then an optional JSON file
 * named by RUNGUARD_CONFIG, then environment variables, then command-line flags. Validated once at
 * start against the declaration: every bad value is reported, each naming where it came from and
 * what it accepts, and the daemon does not start. Only this module and the entry point read
 * `process.env`.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Ajv, ErrorObject, ValidateFunction } from 'ajv';
import { acceptsText, FORMATS, type SettingSchema } from './setting-formats.js';
import type { Config, SettingName, Settings } from './settings.js';

export type { Config, LogFormat, ProviderEntry, Registration } from './settings.js';

/**
 * The declaration as JSON, written by `npm run docs:config` (a test fails when it is stale), from
 * src/ and dist/ alike. Read rather than built: building it loads TypeBox, some 370 modules, which
 * a CLI command that only looks for the daemon's address would pay on every run.
 */
export const SETTINGS_JSON_URL = new URL('../config/settings.schema.json', import.meta.url);

let declaration: typeof Settings | undefined;

function settings(): typeof Settings {
  declaration ??= JSON.parse(readFileSync(SETTINGS_JSON_URL, 'utf8')) as typeof Settings;
  return declaration;
}

export function settingSchema(name: SettingName): SettingSchema {
  return settings().properties[name] as unknown as SettingSchema;
}

export function settingNames(): SettingName[] {
  return Object.keys(settings().properties) as SettingName[];
}

/** Every setting's default. */
export function defaultConfig(): Config {
  return Object.fromEntries(
    settingNames().map((name) => [name, structuredClone(settingSchema(name).default)]),
  ) as Config;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
  constructor(
    message: string,
    /** One line per bad setting. */
    readonly problems: readonly string[] = [message],
  ) {
    super(message);
  }
}

/** A value given for a setting, as it was given, and where it came from (for messages). */
interface Given {
  raw: unknown;
  source: string;
}

let ajv: Ajv | undefined;
const validators = new Map<SettingName, ValidateFunction>();

/**
 * A setting's schema as an Ajv validator, compiled when a value is first given for it: only the
 * settings given are checked (a test checks the defaults), so a CLI command that sets none
 * compiles nothing.
 */
function validatorOf(name: SettingName): ValidateFunction {
  let validate = validators.get(name);
  if (validate) return validate;
  if (!ajv) {
    // Required here, not imported at the top: Ajv is most of the loader's start-up, and a CLI
    // command run without settings given (their defaults are valid) never needs it.
    const { Ajv: AjvClass } = createRequire(import.meta.url)('ajv') as typeof import('ajv');
    ajv = new AjvClass({ allErrors: true, strictNumbers: true });
    ajv.addVocabulary(['env', 'secret', 'accepts']);
    for (const [format, definition] of Object.entries(FORMATS)) {
      ajv.addFormat(format, definition);
    }
  }
  validate = ajv.compile(settingSchema(name));
  validators.set(name, validate);
  return validate;
}

function readJson(path: string): Record<string, unknown> {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  } catch (error) {
    throw new ConfigError(`Cannot read ${path}: ${(error as Error).message}`);
  }
}

export function loadConfig(
  env: NodeJS.ProcessEnv = process.env,
  flags: Partial<Record<SettingName, unknown>> = {},
): Config {
  const fileName = env.RUNGUARD_CONFIG;
  const file = fileName ? readJson(fileName) : {};
  const names = settingNames();
  const unknownKeys = Object.keys(file).filter((key) => !(names as string[]).includes(key));
  if (unknownKeys.length > 0) {
    throw new ConfigError(`Unknown configuration key "${unknownKeys.join('", "')}" in ${fileName}`);
  }
  const candidate: Record<string, unknown> = defaultConfig();
  const problems: string[] = [];
  for (const name of names) {
    const schema = settingSchema(name);
    let given: Given | undefined;
    if (name in file) given = { raw: file[name], source: `"${name}" in ${fileName}` };
    if (env[schema.env] !== undefined) given = { raw: env[schema.env], source: `environment variable ${schema.env}` };
    if (flags[name] !== undefined) given = { raw: flags[name], source: `option --${kebabCase(name)}` };
    if (given === undefined) continue;
    candidate[name] = fromText(given.raw, schema);
    const validate = validatorOf(name);
    if (!validate(candidate[name])) problems.push(problem(name, given, validate.errors ?? []));
  }
  if (problems.length === 1) throw new ConfigError(`Invalid configuration: ${problems[0]}`, problems);
  if (problems.length > 1) {
    throw new ConfigError(`Invalid configuration, ${problems.length} settings:\n  ${problems.join('\n  ')}`, problems);
  }
  const config = normalised(candidate as Config);
  checkRelations(config);
  return Object.freeze(config);
}

/**
 * Text (a variable, a flag, or a string in the file) as the type the setting wants; what cannot be
 * read is passed on as it is, for validation to refuse by name.
 */
function fromText(raw: unknown, schema: SettingSchema): unknown {
  if (typeof raw !== 'string') return raw;
  const branches = schema.anyOf as SettingSchema[] | undefined;
  const trimmed = raw.trim();
  if (branches && trimmed === '') return null; // an empty variable unsets an optional setting
  const number = (item: string) => (/^-?\d+(\.\d+)?$/.test(item) ? Number(item) : item);
  switch ((branches?.find((branch) => branch.type !== 'null') ?? schema).type) {
    case 'integer':
    case 'number':
      return number(trimmed);
    case 'boolean':
      if (/^(true|1|yes|on)$/i.test(trimmed)) return true;
      if (/^(false|0|no|off)$/i.test(trimmed)) return false;
      return raw;
    case 'array': // a comma-separated list
      return trimmed
        .split(',')
        .map((item) => item.trim())
        .filter((item) => item !== '')
        .map(number);
    case 'object': // JSON
      try {
        return JSON.parse(raw) as unknown;
      } catch {
        return raw;
      }
    default:
      return raw;
  }
}

/** A bad setting in one line: where its value came from, what it accepts, and what it got. */
function problem(name: SettingName, { raw, source }: Given, errors: readonly ErrorObject[]): string {
  const schema = settingSchema(name);
  // Where inside an object or a list it went wrong (`ollama.upstream`), from the first error.
  const first = errors[0];
  const extra = (first?.params as { additionalProperty?: string } | undefined)?.additionalProperty;
  const inside = [...(first?.instancePath.split('/').slice(1) ?? []), extra].filter(Boolean).join('.');
  // Start-up errors reach the log pipeline: a value that may hold a password or a key is not echoed.
  const got = schema.secret ? `a value of ${String(raw).length} characters, not shown` : JSON.stringify(raw);
  return `${source} must be ${acceptsText(schema)}${inside ? ` (at ${inside})` : ''} (got ${got})`;
}

/** Base URLs without their trailing slashes; thresholds sorted, each once. */
function normalised(config: Config): Config {
  const trimmed = withoutTrailingSlashes(config, settings() as unknown as Record<string, unknown>) as Config;
  return {
    ...trimmed,
    webhookBudgetThresholds: [...new Set(config.webhookBudgetThresholds)].sort((left, right) => left - right),
  };
}

/** `value` with every string its schema declares an http base URL stripped of trailing slashes. */
function withoutTrailingSlashes(value: unknown, schema: Record<string, unknown>): unknown {
  const branch = (schema.anyOf as Record<string, unknown>[] | undefined)?.find((option) => option.type !== 'null');
  const shape = branch ?? schema;
  if (typeof value === 'string') return shape.format === 'http-base-url' ? value.replace(/\/+$/, '') : value;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
  const properties = (shape.properties ?? {}) as Record<string, Record<string, unknown>>;
  const patterned = Object.values((shape.patternProperties ?? {}) as Record<string, Record<string, unknown>>)[0];
  return Object.fromEntries(
    Object.entries(value).map(([key, item]) => [key, withoutTrailingSlashes(item, properties[key] ?? patterned ?? {})]),
  );
}

/** Rules between settings, which one setting's schema cannot say. */
function checkRelations(config: Config): void {
  // Node refuses a headers timeout longer than the request's: say so by name rather than crash at listen.
  if (config.headersTimeoutMs > config.requestTimeoutMs) {
    throw new ConfigError(
      `Invalid configuration: "headersTimeoutMs" (${config.headersTimeoutMs}) may not exceed "requestTimeoutMs" (${config.requestTimeoutMs})`,
    );
  }
  // A lease shorter than two heartbeats would find a live daemon dead at its first late beat.
  if (config.daemonLeaseMs < 2 * config.daemonHeartbeatIntervalMs) {
    throw new ConfigError(
      `Invalid configuration: "daemonLeaseMs" (${config.daemonLeaseMs}) must be at least twice "daemonHeartbeatIntervalMs" (${config.daemonHeartbeatIntervalMs})`,
    );
  }
}

const kebabCase = (name: string) => name.replace(/[A-Z]/g, (letter) => `-${letter.toLowerCase()}`);
