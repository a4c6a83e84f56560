/** `runguard exec --user <id> -- <command...>`: runs a command inside a guarded run. */
import { Command } from 'commander';
import { loadConfig } from '../../config.js';
import { EXIT_BLOCKED, localApiKey, parseMetadata, runExec } from '../exec.js';

export function execCommand(): Command {
  return new Command('exec')
    .description(
      'run a command inside a guarded run: its OpenAI and Anthropic SDK calls go through the proxy ' +
        `(OPENAI_BASE_URL, ANTHROPIC_BASE_URL); exits with the command's status, ${EXIT_BLOCKED} when the run is blocked`,
    )
    .requiredOption('--user <id>', 'the user the run is for')
    .option('--metadata <key=value...>', 'run metadata, repeatable')
    .argument('<command...>', 'the command to run, after --')
    // Everything after the command's name is the command's own, options included.
    .passThroughOptions()
    .addHelpText('after', '\nEnvironment: RUNGUARD_URL (default http://127.0.0.1:<port>), RUNGUARD_API_KEY (default <data dir>/api-key).')
    .action(async (command: string[], options: { user: string; metadata?: string[] }) => {
      const config = loadConfig(process.env);
      const status = await runExec({
        url: (process.env.RUNGUARD_URL ?? `http://127.0.0.1:${config.port}`).replace(/\/+$/, ''),
        apiKey: await localApiKey(config.proxyApiKey, config.dataDir),
        userId: options.user,
        metadata: parseMetadata(options.metadata ?? []),
        command,
        env: process.env,
        stderr: process.stderr,
      });
      process.exitCode = status;
    });
}
