/**
 * Reference pages generated from the code they describe: a change to a command or a setting that
 * is not carried into docs/ fails here (run `npm run docs:cli` / `npm run docs:config`). So does
 * one not carried into config/settings.schema.json, the declaration as the loader reads it.
 */
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { DOC_PATH as CLI_DOC, renderCliDoc } from '../../../scripts/cli-docs.js';
import {
  DOC_PATH as CONFIG_DOC,
  renderConfigurationDoc,
  renderSettingsJson,
  SETTINGS_JSON_PATH,
} from '../../../scripts/config-docs.js';

describe('the generated reference pages', () => {
  it('when docs/cli.md is compared with the help of every command, then it is the same (else npm run docs:cli)', async () => {
    const committed = await readFile(CLI_DOC, 'utf8');
    expect(committed).toBe(renderCliDoc());
    expect(committed).toContain('## `npx runguard runs list`');
  });

  it('when docs/configuration.md is compared with the settings declaration, then it is the same (else npm run docs:config)', async () => {
    expect(await readFile(CONFIG_DOC, 'utf8')).toBe(renderConfigurationDoc());
  });

  it('when config/settings.schema.json is compared with the settings declaration, then it is the same (else npm run docs:config)', async () => {
    expect(await readFile(SETTINGS_JSON_PATH, 'utf8')).toBe(renderSettingsJson());
  });
});
