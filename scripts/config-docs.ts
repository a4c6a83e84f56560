/**
 * Generates docs/configuration.md, and config/settings.schema.json (what the loader reads), from the
 * settings' declaration (src/settings.ts).
 *
 *   npm run docs:config               # write both
 *   npm run docs:config -- --check    # exit 1 when a committed file is not what the declaration gives
 */
import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { SETTINGS_JSON_URL } from '../src/config.js';
import { acceptsText, type SettingSchema } from '../src/setting-formats.js';
import { SETTING_TOPICS, Settings } from '../src/settings.js';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const DOC_PATH = join(REPO_ROOT, 'docs', 'configuration.md');
export const SETTINGS_JSON_PATH = fileURLToPath(SETTINGS_JSON_URL);

const INTRO = `# Configuration

<!-- Generated from src/settings.ts by \`npm run docs:config\`: edit the declaration, not this file. -->

The daemon reads each setting from, last one winning:

1. its default (below);
2. a JSON file named by \`RUNGUARD_CONFIG\`, keyed by setting name (\`{"port": 9000}\`; an unknown
   key is an error);
3. its environment variable;
4. a command-line flag of \`npx runguard start\`: \`--port\`, \`--host\`, \`--data-dir\`.

Values from variables and flags are text: numbers are read as numbers, \`true\`/\`false\` (or
\`1\`/\`0\`, \`yes\`/\`no\`, \`on\`/\`off\`) as booleans, lists as comma-separated items and objects as
JSON. An empty variable unsets an optional setting.

A bad value stops the daemon before it listens. Every bad setting is reported, one line each,
naming where the value came from and what the setting accepts; a value that may hold a password
or a key (database and Redis URLs, secrets, API keys) is never echoed. Two rules tie settings
together: \`headersTimeoutMs\` may not exceed \`requestTimeoutMs\`, and \`daemonLeaseMs\` must be at
least twice \`daemonHeartbeatIntervalMs\`.
`;

/** A default as the table shows it, with sizes and durations in words where they divide evenly. */
function defaultText(name: string, value: unknown): string {
  if (value === null) return 'unset';
  const code = `\`${typeof value === 'string' ? value : JSON.stringify(value)}\``;
  if (typeof value !== 'number' || value === 0) return code;
  const units: [number, string][] = name.endsWith('Bytes')
    ? [
        [1024 ** 3, 'GiB'],
        [1024 ** 2, 'MiB'],
        [1024, 'KiB'],
      ]
    : name.endsWith('Ms')
      ? [
          [3_600_000, 'h'],
          [60_000, 'min'],
          [1_000, 's'],
        ]
      : [];
  const unit = units.find(([size]) => value % size === 0);
  return unit ? `${code} (${value / unit[0]} ${unit[1]})` : code;
}

const cell = (text: string) => text.replaceAll('|', '\\|');

export function renderConfigurationDoc(): string {
  const sections = SETTING_TOPICS.map(({ title, settings }) => {
    const rows = Object.entries(settings).map(([name, schema]) => {
      const setting = schema as unknown as SettingSchema;
      return `| \`${name}\` | \`${setting.env}\` | ${cell(defaultText(name, setting.default))} | ${cell(acceptsText(setting))} | ${cell(setting.description)} |`;
    });
    return [
      `## ${title}`,
      '',
      '| setting | variable | default | accepts | meaning |',
      '|---|---|---|---|---|',
      ...rows,
    ].join('\n');
  });
  return `${INTRO}\n${sections.join('\n\n')}\n`;
}

/** The declaration as the loader reads it: JSON Schema, with the settings' own keywords. */
export function renderSettingsJson(): string {
  return `${JSON.stringify(Settings, null, 2)}\n`;
}

async function main(argv: readonly string[]): Promise<void> {
  const files: [string, string][] = [
    [DOC_PATH, renderConfigurationDoc()],
    [SETTINGS_JSON_PATH, renderSettingsJson()],
  ];
  if (argv.includes('--check')) {
    for (const [path, text] of files) {
      const committed = await readFile(path, 'utf8').catch(() => '');
      if (committed !== text) {
        process.stderr.write(`${path} is stale: run npm run docs:config and commit it.\n`);
        process.exitCode = 1;
      }
    }
    return;
  }
  for (const [path, text] of files) {
    await writeFile(path, text);
    process.stdout.write(`Wrote ${path}\n`);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main(process.argv.slice(2));
