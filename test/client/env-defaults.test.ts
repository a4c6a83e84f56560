/** The client's defaults from the environment, as the provider SDKs read OPENAI_API_KEY. */
import { afterEach, describe, expect, it } from 'vitest';
import { GuardClient, GuardConfigError } from '../../clients/typescript/src/index.js';

const KEY = `lg_abcdefghijkl_${'x'.repeat(40)}`;
const saved = { key: process.env.RUNGUARD_API_KEY, url: process.env.RUNGUARD_URL };
afterEach(() => {
  for (const [name, value] of [
    ['RUNGUARD_API_KEY', saved.key],
    ['RUNGUARD_URL', saved.url],
  ] as const) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
});

describe('GuardClient defaults', () => {
  it('when no apiKey is given and RUNGUARD_API_KEY and RUNGUARD_URL are set, then it uses them', () => {
    process.env.RUNGUARD_API_KEY = KEY;
    process.env.RUNGUARD_URL = 'http://127.0.0.1:18787/';
    expect(new GuardClient().baseUrl).toBe('http://127.0.0.1:18787');
  });

  it('when an apiKey is given, then it wins over RUNGUARD_API_KEY, and a bad one is named as the option', () => {
    process.env.RUNGUARD_API_KEY = KEY;
    expect(() => new GuardClient({ apiKey: 'sk-not-ours' })).toThrow(/from the apiKey option/);
  });

  it('when RUNGUARD_API_KEY is malformed, then the error names the variable', () => {
    process.env.RUNGUARD_API_KEY = `${KEY}\n`;
    expect(() => new GuardClient()).toThrow(/from RUNGUARD_API_KEY.*whitespace/);
  });

  it('when neither is there, then the error says how to export the key from the key file', () => {
    delete process.env.RUNGUARD_API_KEY;
    const build = () => new GuardClient();
    expect(build).toThrow(GuardConfigError);
    expect(build).toThrow('export RUNGUARD_API_KEY="$(cat .runguard/api-key)"');
  });
});
