/** `runguard exec --user <id> -- <command...>`: runs a command inside a guarded run. */
import { Command, Option } from 'commander';
import { CliError, EXIT } from '../errors.js';
import { resolveConnection, type ConnectionFlags } from '../connection.js';

export function execCommand(): Command {
  return (
    new Command('exec')
      .description(
        'run a command inside a guarded run: its OpenAI and Anthropic SDK calls go through the proxy ' +
          `(OPENAI_BASE_URL, ANTHROPIC_BASE_URL); exits with the command's status, or ${EXIT.BLOCKED} when it was not started ` +
          '(the run blocked, or the daemon unreachable)',
      )
      // Checked in the action, not by commander: its check of a required option comes before its
      // check of unknown ones, and `--usr` would then be reported as a missing --user.
      .option('--user <id>', 'the user the run is for (required)')
      .option('--metadata <key=value...>', 'run metadata, repeatable')
      .option(
        '--tag <key=value...>',
        "the run's tags, repeatable (at most 16; key 1-64 of a-z 0-9 _ . -, value 1-128 characters)",
      )
      .option('--max-steps <n>', "the run's step limit: its next step is denied RUN_STEP_LIMIT_EXCEEDED")
      .option(
        '--max-cost <usd>',
        "the run's budget in USD: once its cost reaches it, steps are denied RUN_BUDGET_EXCEEDED",
      )
      .option(
        '--max-identical-calls <n>',
        'identical calls in a row the run may make: the next is denied REPEATED_CALL_LOOP',
      )
      .option('-q, --quiet', 'print no summary line (run, status, calls, tokens, cost) to stderr at the end')
      .addOption(
        new Option('--url <url>', 'daemon URL (env RUNGUARD_URL; default the local daemon: http://127.0.0.1:<port>)'),
      )
      .addOption(
        new Option(
          '--api-key <key>',
          'API key lg_... (env RUNGUARD_API_KEY; default <data dir>/api-key); the command does not get it',
        ),
      )
      .argument('<command...>', 'the command to run, after --')
      // Everything after the command's name is the command's own, options included.
      .passThroughOptions()
      .action(
        async (
          command: string[],
          options: ConnectionFlags & {
            user?: string;
            metadata?: string[];
            tag?: string[];
            quiet?: boolean;
            maxSteps?: string;
            maxCost?: string;
            maxIdenticalCalls?: string;
          },
        ) => {
          if (options.user === undefined) throw new CliError("required option '--user <id>' not specified");
          // Loaded here, not at the top: running a command under a run is code no other command needs.
          const { parseMetadata, parseRunLimits, parseTags, runExec } = await import('../exec.js');
          const connection = resolveConnection(options, process.env);
          const status = await runExec({
            ...connection,
            origin: connection,
            quiet: options.quiet === true,
            userId: options.user,
            metadata: parseMetadata(options.metadata ?? []),
            tags: parseTags(options.tag ?? []),
            limits: parseRunLimits(options),
            command,
            env: process.env,
            stderr: process.stderr,
          });
          process.exitCode = status;
        },
      )
  );
}
