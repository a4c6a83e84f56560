/** The `runguard` command line. */
import { Command, Option } from 'commander';
import { ConfigError, loadConfig } from '../config.js';
import { startDaemon, VERSION } from '../daemon.js';
import { createLogger } from '../logger.js';

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

export async function main(argv: string[]): Promise<void> {
  const program = new Command('runguard')
    .description('A guardrail sidecar for AI agents')
    .version(VERSION)
    .addCommand(startCommand());
  try {
    await program.parseAsync(argv);
  } catch (error) {
    const message = error instanceof ConfigError ? error.message : `runguard: ${(error as Error).message}`;
    process.stderr.write(`${message}\n`);
    process.exitCode = 1;
  }
}
