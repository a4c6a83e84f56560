/**
 * The daemon: its stores (stores.ts), its instance record, the app (daemon-app.ts), the background
 * work (background-work.ts) and the listening socket, started in that order and stopped in the
 * reverse. A start that fails part way stops what it had started.
 */
import { resolve } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Config } from '../config.js';
import { startDaemonInstance, type DaemonInstance } from '../jobs/daemon-instance.js';
import { VERSION } from '../version.js';
import type { OutboundPolicy } from '../webhooks/outbound-policy.js';
import { backgroundWork, type BackgroundWork } from './background-work.js';
import { buildDaemonApp, type DaemonApp } from './daemon-app.js';
import { closedWithin, closeWithin } from './graceful-close.js';
import { recordDaemon } from './local-daemon.js';
import { openStores, type Stores } from './stores.js';
import { noticeDashboard, noticeFirstSignInLink } from './terminal-notices.js';

export interface Daemon {
  app: FastifyInstance;
  url: string;
  stores: Stores;
  /**
   * Stops accepting connections, lets in-flight requests and streams finish for up to
   * `shutdownGraceMs`, cuts what is still open, then closes the stores. Records are written in
   * transactions and the pools wait for their checked-out clients, so nothing is half-written.
   */
  close(): Promise<void>;
}

export interface StartOptions {
  /** Record the daemon's URL for the CLI (see local-daemon.ts), with the user-level path read from this environment. */
  recordFor?: NodeJS.ProcessEnv;
}

export async function startDaemon(
  config: Config,
  logger: Logger,
  out: NodeJS.WritableStream = process.stdout,
  options: StartOptions = {},
): Promise<Daemon> {
  const stores = await openStores(config, logger);
  // Where webhooks may go; the port is the one bound, once the daemon listens (0 picks one).
  const webhookPolicy: OutboundPolicy = { allowPrivate: config.webhookAllowPrivate, ownPort: config.port || null };
  // A start that fails past here closes the stores: an embedded database's lock goes with them.
  const failed = async (error: unknown): Promise<never> => {
    await stores.close().catch(() => {});
    throw error;
  };
  // Registered before any call is taken: every proxied call carries this process's id.
  const instance = await startDaemonInstance({
    db: stores.db,
    logger: logger.child({ component: 'daemon-instance' }),
    version: VERSION,
    heartbeatMs: config.daemonHeartbeatIntervalMs,
  }).catch(failed);
  const served = await buildDaemonApp(config, { stores, logger, out, webhookPolicy, instance }).catch(
    async (error: unknown) => {
      await instance.stop().catch(() => {});
      return failed(error);
    },
  );
  const { app, providers, telemetry } = served;
  const background = backgroundWork(config, { stores, instance, metrics: served.metrics, webhookPolicy, logger });
  // What a dead daemon (this one's last life, too) left unfinished is ended before the first call.
  await background.recoverFirst();
  let address: string;
  try {
    address = await app.listen({ host: config.host, port: config.port });
    // The port actually bound (0 in the configuration picks one): webhooks never go to it.
    webhookPolicy.ownPort = Number(new URL(address).port) || webhookPolicy.ownPort;
  } catch (error) {
    await app.close().catch(() => {});
    await telemetry.shutdown();
    await providers.close().catch(() => {});
    await background.stop();
    await instance.stop().catch(() => {});
    await stores.close().catch(() => {});
    throw error;
  }
  background.start();
  logger.info({ url: address, database: stores.db.kind, counters: stores.counters.kind }, 'runguard listening');
  const forget = options.recordFor
    ? recordListening(config, app, served.localKey.path, options.recordFor, logger)
    : () => {};
  // Where a browser reaches the daemon: the configured public URL, else where it listens.
  const dashboardUrl = config.publicUrl?.replace(/\/+$/, '') ?? address;
  noticeDashboard(out, dashboardUrl);
  if (served.created) await noticeFirstSignInLink(out, stores.db, served.created.workspaceId, dashboardUrl, logger);
  let closing: Promise<void> | null = null;
  return {
    app,
    url: address,
    stores,
    close() {
      // Bounded, whatever stops answering meanwhile: the last writes of results (one attempt each,
      // bounded by a statement's timeout) and the pools' close get `shutdownAfterGraceMs` past the
      // grace. A database or Redis that stopped answering, without refusing or timing out, must not
      // keep a stopping daemon alive: past that, the close fails, and `runguard start` exits 1.
      closing ??= closedWithin(
        stopDaemon(config, logger, { ...served, stores, background, instance, forget }),
        config.shutdownGraceMs + config.shutdownAfterGraceMs,
      );
      return closing;
    },
  };
}

/** What a started daemon stops. */
interface Running extends DaemonApp {
  stores: Stores;
  background: BackgroundWork;
  instance: DaemonInstance;
  /** Removes the records of where it listens. */
  forget: () => void;
}

/** A daemon's shutdown: the socket and the background work first, the stores they use last. */
async function stopDaemon(config: Config, logger: Logger, parts: Running): Promise<void> {
  parts.forget();
  // The socket stops accepting at once; the background work stops beside it (it uses the stores,
  // closed once all are done).
  await Promise.all([closeWithin(parts.app, config.shutdownGraceMs, logger), parts.background.stop()]);
  // Every call's result is written (the app's close waited for them): nothing to recover.
  await parts.instance.stop();
  await parts.telemetry.shutdown();
  await parts.providers.close();
  await parts.stores.close();
}

/** Where the CLI finds this daemon: its port on loopback when it listens on every address. */
function recordListening(
  config: Config,
  app: FastifyInstance,
  keyFile: string,
  env: NodeJS.ProcessEnv,
  logger: Logger,
): () => void {
  const { port } = app.server.address() as AddressInfo;
  const host = ['', '0.0.0.0', '::'].includes(config.host) ? '127.0.0.1' : config.host;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return recordDaemon(
    {
      url,
      data_dir: resolve(config.dataDir),
      key_file: keyFile,
      pid: process.pid,
      started_at: new Date().toISOString(),
    },
    env,
    (file, error) =>
      logger.warn({ file, err: error }, 'cannot record where this daemon listens; the CLI may not find it'),
  );
}
