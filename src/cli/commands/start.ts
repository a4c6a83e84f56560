/** `runguard start`: the daemon, until SIGTERM or SIGINT. */
import { Command, Option } from 'commander';
import { loadConfig } from '../../config.js';

/** Signals this close together are one request to stop, not an impatient second. */
const SAME_REQUEST_MS = 1_000;

export function startCommand(): Command {
  return new Command('start')
    .description('start the daemon (embedded database unless DATABASE_URL is set)')
    .addOption(new Option('--port <port>', 'port to listen on (env PORT)'))
    .addOption(new Option('--host <host>', 'address to bind (env HOST)'))
    .addOption(
      new Option('--data-dir <dir>', 'where the embedded database and the API key live (env RUNGUARD_DATA_DIR)'),
    )
    .action(async (options: { port?: string; host?: string; dataDir?: string }) => {
      const config = loadConfig(process.env, { port: options.port, host: options.host, dataDir: options.dataDir });
      // Loaded here, not at the top: the client commands need none of the server.
      const [{ startDaemon }, { createLogger }] = await Promise.all([
        import('../../daemon/daemon.js'),
        import('../../logger.js'),
      ]);
      const logger = createLogger(config.logLevel, { format: config.logFormat });
      const starting = startDaemon(config, logger, process.stdout, { recordFor: process.env });
      let stoppingSince: number | null = null;
      const stop = (signal: string) => {
        if (stoppingSince !== null) {
          // One request often arrives by several paths at once: a supervisor signals the process
          // group, and npm passes the same signal on to the daemon. Only a later one is a second.
          if (performance.now() - stoppingSince < SAME_REQUEST_MS) return;
          // A second signal: the operator does not want to wait for the grace period.
          logger.warn({ signal }, 'second signal during shutdown; exiting now');
          process.exit(1);
        }
        stoppingSince = performance.now();
        logger.info({ signal, graceMs: config.shutdownGraceMs }, 'shutting down: finishing in-flight requests');
        starting
          .then((daemon) => daemon.close())
          .then(
            () => {
              logger.info('stopped');
              process.exit(0);
            },
            (error: unknown) => {
              logger.error({ err: error }, 'shutdown failed');
              process.exit(1);
            },
          );
      };
      // Before the daemon starts: it serves requests before startDaemon resolves (it prints the
      // first sign-in link after it listens), and a signal then must shut it down gracefully, not
      // kill it. One that comes before it listens stops it once it has started.
      process.on('SIGTERM', () => stop('SIGTERM'));
      process.on('SIGINT', () => stop('SIGINT'));
      await starting;
    });
}
