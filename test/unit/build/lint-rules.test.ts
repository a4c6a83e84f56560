/**
 * The lint rules that keep `any` from leaking and names readable apply where the project says:
 * everywhere but the store's row mapping and tests for the `no-unsafe-*` rules, and the CLI and the
 * SDK among the folders that must name things in words. `npm run lint` enforces them; this checks
 * that the configuration still asks for them.
 */
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const UNSAFE = ['assignment', 'member-access', 'argument', 'return', 'call'].map(
  (name) => `@typescript-eslint/no-unsafe-${name}`,
);
const eslint = new ESLint();

/** A rule's severity for a file, as the configuration resolves it (0 off, 2 error). */
async function severity(file: string, rule: string): Promise<number> {
  const config = (await eslint.calculateConfigForFile(file)) as { rules: Record<string, unknown> };
  const setting = config.rules[rule];
  const level = Array.isArray(setting) ? (setting[0] as unknown) : setting;
  return level === 'error' || level === 2 ? 2 : level === 'warn' || level === 1 ? 1 : 0;
}

describe('the lint configuration', () => {
  it.each(['src/api/app.ts', 'src/proxy/call-relay.ts', 'src/cli/main.ts', 'bench/run.ts', 'scripts/config-docs.ts'])(
    'when %s is linted, then every no-unsafe rule is an error',
    async (file) => {
      for (const rule of UNSAFE) expect(await severity(file, rule), rule).toBe(2);
    },
  );

  it.each(['src/store/runs.ts', 'test/unit/config/settings.test.ts'])(
    'when %s is linted, then the no-unsafe rules are off (rows and test answers are read loosely)',
    async (file) => {
      for (const rule of UNSAFE) expect(await severity(file, rule), rule).toBe(0);
    },
  );

  it.each(['src/cli/output.ts', 'clients/typescript/src/extractors.ts', 'src/api/app.ts'])(
    'when %s is linted, then one-letter names are an error',
    async (file) => {
      expect(await severity(file, 'id-length')).toBe(2);
    },
  );
});
