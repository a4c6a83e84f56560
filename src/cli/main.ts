/** The `runguard` command line. */
import { Command } from 'commander';
import { ConfigError } from '../config.js';
import { VERSION } from '../version.js';
import { COMMANDS } from './commands/index.js';
import { describeError } from './errors.js';

export function buildProgram(): Command {
  const program = new Command('runguard')
    .description('A guardrail sidecar for AI agents')
    .version(VERSION)
    // `exec` passes everything after its command's name to that command, options included.
    .enablePositionalOptions();
  for (const command of COMMANDS) program.addCommand(command());
  return program;
}

/**
 * A reader that stopped reading (`runguard runs list | head -1`) is not an error: the CLI ends
 * quietly with status 0, as `head`'s writer is expected to, whatever the command was writing.
 */
function endQuietlyOnClosedStdout(): void {
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'EPIPE') process.exit(0);
    throw error;
  });
}

export async function main(argv: string[]): Promise<void> {
  endQuietlyOnClosedStdout();
  try {
    await buildProgram().parseAsync(argv);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exitCode = 1;
      return;
    }
    const { message, exitCode } = describeError(error);
    process.stderr.write(`runguard: ${message}\n`);
    process.exitCode = exitCode;
  }
}
