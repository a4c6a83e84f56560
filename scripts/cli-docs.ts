/**
 * Generates docs/cli.md from the CLI's own declaration (commander's help of every command).
 *
 *   npm run docs:cli               # write docs/cli.md
 *   npm run docs:cli -- --check    # exit 1 when the committed file is not what the CLI gives
 */
import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Command } from 'commander';
import { buildProgram } from '../src/cli/main.js';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const DOC_PATH = join(REPO_ROOT, 'docs', 'cli.md');

const INTRO = `# The CLI

<!-- Generated from the commands' declarations (src/cli/commands/) by \`npm run docs:cli\`: edit those, not this file. -->

From a checkout the CLI is \`npx runguard\` (\`npm link\` once puts \`runguard\` on the PATH).

**Finding the daemon and the key.** Every command that talks to a daemon takes \`--url\`,
\`--api-key\` and \`--json\` (JSON for scripts instead of tables). It finds the daemon, first found
wins: \`--url\`, \`RUNGUARD_URL\`, the \`daemon.json\` a running daemon writes in its data directory
(\`.runguard\`, or \`RUNGUARD_DATA_DIR\`), the last daemon started by this user
(\`~/.config/runguard/daemon.json\`), then the configured port; and the key: \`--api-key\`,
\`RUNGUARD_API_KEY\`, then that daemon's \`api-key\` file. When nothing answers it lists every place
it looked; when a key is refused it says where that key came from.

**Exit status**: 0 on success; 1 with the server's message on failure; 3 when no daemon answers
(and for \`exec\`, when the run was blocked: the command was not started). Colour is used on a
terminal, never in a pipe or under \`NO_COLOR\`.

The daemon's own settings (\`start\`): [configuration.md](configuration.md).
`;

/** Every command under `command`, depth first, with its full name (`runs list`). */
function commandsUnder(command: Command, prefix: string[] = []): { name: string[]; command: Command }[] {
  return command.commands
    .filter((child) => child.name() !== 'help')
    .flatMap((child) => {
      const name = [...prefix, child.name()];
      return [{ name, command: child }, ...commandsUnder(child, name)];
    });
}

/** A command's help as a terminal 100 columns wide, without colour, prints it. */
function helpOf(command: Command): string {
  command.configureOutput({ getOutHelpWidth: () => 100, getOutHasColors: () => false });
  return command.helpInformation().trimEnd();
}

export function renderCliDoc(): string {
  const program = buildProgram();
  const sections = [
    ['## `npx runguard`', '', '```', helpOf(program), '```'].join('\n'),
    ...commandsUnder(program).map(({ name, command }) =>
      [`## \`npx runguard ${name.join(' ')}\``, '', '```', helpOf(command), '```'].join('\n'),
    ),
  ];
  return `${INTRO}\n${sections.join('\n\n')}\n`;
}

async function main(argv: readonly string[]): Promise<void> {
  const text = renderCliDoc();
  if (argv.includes('--check')) {
    const committed = await readFile(DOC_PATH, 'utf8').catch(() => '');
    if (committed !== text) {
      process.stderr.write(`${DOC_PATH} is stale: run npm run docs:cli and commit it.\n`);
      process.exitCode = 1;
    }
    return;
  }
  await writeFile(DOC_PATH, text);
  process.stdout.write(`Wrote ${DOC_PATH}\n`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main(process.argv.slice(2));
