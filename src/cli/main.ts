/** The `runguard` command line. */
import { Command, Option } from 'commander';
import { ConfigError, loadConfig } from '../config.js';
import { startDaemon, VERSION } from '../daemon.js';
import { createLogger } from '../logger.js';
import { EXIT_BLOCKED, localApiKey, parseMetadata, runExec } from './exec.js';

function startCommand(): Command {
  return new Command('start')
    .description('start the daemon (embedded database unless DATABASE_URL is set)')
    .addOption(new Option('--port <port>', 'port to listen on (env PORT)'))
    .addOption(new Option('--host <host>', 'address to bind (env HOST)'))
    .addOption(new Option('--data-dir <dir>', 'where the embedded database and the API key live (env RUNGUARD_DATA_DIR)'))
    .action(async (options: { port?: string; host?: string; dataDir?: string }) => {
      const config = loadConfig(process.env, { port: options.port, host: options.host, dataDir: options.dataDir });
      const logger = createLogger(config.logLevel);
      const daemon = await startDaemon(config, logger);
      let stopping = false;
      const stop = (signal: string) => {
        if (stopping) return;
        stopping = true;
        logger.info({ signal }, 'shutting down');
        daemon.close().then(
          () => process.exit(0),
          (error: unknown) => {
            logger.error({ err: error }, 'shutdown failed');
            process.exit(1);
          },
        );
      };
      process.on('SIGTERM', () => stop('SIGTERM'));
      process.on('SIGINT', () => stop('SIGINT'));
    });
}

function execCommand(): Command {
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

export async function main(argv: string[]): Promise<void> {
  const program = new Command('runguard')
    .description('A guardrail sidecar for AI agents')
    .version(VERSION)
    .enablePositionalOptions()
    .addCommand(startCommand())
    .addCommand(execCommand());
  try {
    await program.parseAsync(argv);
  } catch (error) {
    const message = error instanceof ConfigError ? error.message : `runguard: ${(error as Error).message}`;
    process.stderr.write(`${message}\n`);
    process.exitCode = 1;
  }
}
