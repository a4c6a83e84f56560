/**
 * What the one-question tools measure against: a fresh Postgres database and Redis prefix, the
 * fake OpenAI upstream (10 ms before each answer by default, 1 ms between SSE events), and the
 * daemon on them.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServices } from './database.js';
import { startDaemon, startHelper, type Child, type DaemonOptions, type DaemonProcess } from './processes.js';

export interface ProxyStack {
  daemon: DaemonProcess;
  upstream: Child;
  stop(): Promise<void>;
}

export async function startProxyStack(daemon: Partial<DaemonOptions> = {}, upstreamDelayMs = 10): Promise<ProxyStack> {
  const services = await createServices();
  const dataDir = await mkdtemp(join(tmpdir(), 'runguard-bench-'));
  const upstream = await startHelper('upstream-server.ts', [String(upstreamDelayMs), '1']);
  const started = await startDaemon({
    databaseUrl: services.databaseUrl,
    redisUrl: services.redisUrl,
    redisKeyPrefix: services.redisKeyPrefix,
    dataDir,
    openaiUpstream: `${upstream.url}/v1`,
    ...daemon,
  });
  return {
    daemon: started,
    upstream,
    async stop() {
      await started.stop();
      await upstream.stop();
      await services.drop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
