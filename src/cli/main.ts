/** The `runguard` command line. */
import { Command } from 'commander';
import { ConfigError } from '../config.js';
import { VERSION } from '../version.js';
import { COMMANDS } from './commands/index.js';
import { describeError } from './errors.js';

export function buildProgram(): Command {
  const program = new Command('runguard').description('A guardrail sidecar for AI agents').version(VERSION);
  for (const command of COMMANDS) program.addCommand(command());
  return program;
}

export async function main(argv: string[]): Promise<void> {
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
