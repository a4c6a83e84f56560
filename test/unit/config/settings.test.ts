/**
 * The settings' declaration (src/settings.ts) is the one description of the configuration: the
 * loader's defaults and checks, and docs/configuration.md, come from it.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, defaultConfig, loadConfig, settingNames, settingSchema } from '../../../src/config.js';

const SETTING_NAMES = settingNames();

/** A value as an environment variable would carry it. */
function asText(value: unknown): string {
  if (value === null) return '';
  if (Array.isArray(value)) return value.join(',');
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

describe('the settings declaration', () => {
  it('when every setting is read, then each has its own variable, a default and a one-line description', () => {
    const variables = SETTING_NAMES.map((name) => settingSchema(name).env);
    expect(new Set(variables).size).toBe(SETTING_NAMES.length);
    for (const name of SETTING_NAMES) {
      const schema = settingSchema(name);
      expect(schema.env, name).toMatch(/^[A-Z][A-Z0-9_]*$/);
      expect(schema, name).toHaveProperty('default');
      expect(schema.description, name).toMatch(/^[^\n]{10,}$/);
    }
  });

  it('when every variable is set to its default as text, then each passes validation and reads back as the default', () => {
    const env = Object.fromEntries(
      SETTING_NAMES.map((name) => [settingSchema(name).env, asText(settingSchema(name).default)]),
    );
    expect(loadConfig(env)).toEqual(defaultConfig());
    expect(loadConfig({})).toEqual(defaultConfig());
  });

  it('when several variables are bad, then there is one error for each, naming the variable and what it accepts', () => {
    let error: unknown;
    try {
      loadConfig({
        PORT: 'eighty',
        RUNGUARD_LOG_FORMAT: 'xml',
        RUNGUARD_METRICS_ENABLED: 'maybe',
        RUNGUARD_PROVIDERS: '{"ollama": {"type": "openai", "upstream": "ftp://x"}}',
        HOST: '0.0.0.0', // a good one among them
      });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems).toEqual([
      'environment variable PORT must be an integer from 0 to 65535 (got "eighty")',
      'environment variable RUNGUARD_LOG_FORMAT must be one of auto, json, pretty (got "xml")',
      'environment variable RUNGUARD_METRICS_ENABLED must be true or false (got "maybe")',
      expect.stringMatching(
        /^environment variable RUNGUARD_PROVIDERS must be a JSON object of providers by name.* \(at ollama\.upstream\) \(got /,
      ),
    ]);
    expect((error as Error).message).toMatch(/^Invalid configuration, 4 settings:\n {2}environment variable PORT/);
  });

  it('when a value comes from the file named by RUNGUARD_CONFIG, then the error names the key and the file; an unknown key is refused', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rg-config-'));
    try {
      const file = join(dir, 'runguard.json');
      await writeFile(file, JSON.stringify({ port: 9001, webhookBudgetThresholds: [1, 0.5] }));
      expect(loadConfig({ RUNGUARD_CONFIG: file })).toMatchObject({ port: 9001, webhookBudgetThresholds: [0.5, 1] });
      expect(loadConfig({ RUNGUARD_CONFIG: file, PORT: '9002' }).port).toBe(9002);
      await writeFile(file, JSON.stringify({ port: 'x' }));
      expect(() => loadConfig({ RUNGUARD_CONFIG: file })).toThrow(
        `"port" in ${file} must be an integer from 0 to 65535`,
      );
      await writeFile(file, JSON.stringify({ prot: 1 }));
      expect(() => loadConfig({ RUNGUARD_CONFIG: file })).toThrow(`Unknown configuration key "prot" in ${file}`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('when base URLs end in slashes, then they are kept without them; an empty optional variable unsets it', () => {
    const config = loadConfig({
      RUNGUARD_OPENAI_UPSTREAM: 'http://127.0.0.1:9/v1/',
      RUNGUARD_PUBLIC_URL: 'https://guard.example.com/',
      RUNGUARD_PROVIDERS: '{"ollama": {"type": "openai", "upstream": "http://127.0.0.1:11434/v1/"}}',
      DATABASE_URL: '',
    });
    expect(config).toMatchObject({
      openaiUpstream: 'http://127.0.0.1:9/v1',
      publicUrl: 'https://guard.example.com',
      providers: { ollama: { type: 'openai', upstream: 'http://127.0.0.1:11434/v1' } },
      databaseUrl: null,
    });
  });
});
